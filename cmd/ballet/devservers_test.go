package main

import (
	"context"
	"fmt"
	"github.com/balletplanner/ballet/internal/porttest"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store/storetest"
)

// Servers the services.sh tests make and stop: distribution clusters, and
// what the script started on a test's spare ports.

// createCluster makes a distribution cluster on port with pg_createcluster,
// as installing Debian's postgresql does, and drops it when t ends. It
// returns "version/name".
func createCluster(t *testing.T, port int, start bool) string {
	t.Helper()
	if _, err := exec.LookPath("pg_createcluster"); err != nil {
		t.Fatalf("pg_createcluster is not installed (Debian's postgresql-common): %v", err)
	}
	version := newestPostgres(t)
	name := fmt.Sprintf("ballettest%d", port)
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join("/etc/postgresql", version, name)); err != nil {
			return
		}
		if out, err := exec.Command("pg_dropcluster", "--stop", version, name).CombinedOutput(); err != nil {
			t.Errorf("pg_dropcluster --stop %s %s: %v\n%s", version, name, err, out)
		}
	})
	args := []string{version, name, "--port", strconv.Itoa(port), "--start-conf", "manual"}
	if start {
		args = append(args, "--start")
	}
	if out, err := exec.Command("pg_createcluster", args...).CombinedOutput(); err != nil {
		t.Fatalf("pg_createcluster %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return version + "/" + name
}

// setPassword gives role postgres of cluster ("version/name") a password,
// through the local socket as the postgres user.
func setPassword(t *testing.T, cluster, password string) {
	t.Helper()
	cmd := exec.Command("runuser", "-u", "postgres", "--", "psql", "--cluster", cluster, "-w", "-d", "postgres",
		"-qc", fmt.Sprintf("ALTER ROLE postgres PASSWORD '%s'", password))
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("set the password of role postgres on %s: %v\n%s", cluster, err, out)
	}
}

// newestPostgres is the newest major version under /usr/lib/postgresql.
func newestPostgres(t *testing.T) string {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	var versions []int
	for _, b := range bins {
		if v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b)))); err == nil {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		t.Fatal("no postgres under /usr/lib/postgresql/*/bin (Debian's postgresql)")
	}
	sort.Ints(versions)
	return strconv.Itoa(versions[len(versions)-1])
}

// stopPostgresOn stops a postgres that services.sh started on port, found
// through its socket lock file (it holds the postmaster's pid and data
// directory), and removes a data directory it put outside the clone.
func stopPostgresOn(t *testing.T, port int, clone string) {
	t.Helper()
	outside, _ := filepath.Glob("/var/lib/ballet-dev/" + clone + "-*")
	defer func() {
		for _, d := range outside {
			if err := os.RemoveAll(d); err != nil {
				t.Errorf("remove %s: %v", d, err)
			}
		}
		_ = os.Remove("/var/lib/ballet-dev") // only when empty
	}()
	lock, err := os.ReadFile(fmt.Sprintf("/tmp/.s.PGSQL.%d.lock", port))
	if err != nil {
		return // services.sh started no postgres of its own there
	}
	pid, err := strconv.Atoi(strings.SplitN(string(lock), "\n", 2)[0])
	if err != nil || pid <= 1 {
		t.Errorf("socket lock file of port %d names no pid: %q", port, lock)
		return
	}
	_ = syscall.Kill(pid, syscall.SIGINT) // fast shutdown
	if !storetest.Poll(storetest.WaitTimeout, func() bool { return exited(pid) }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("postgres %d on port %d did not stop after SIGINT; killed it", pid, port)
	}
}

// exited says whether pid is gone (or a zombie no one has reaped yet).
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	end := strings.LastIndexByte(string(stat), ')')
	return end > 0 && end+2 < len(stat) && stat[end+2] == 'Z'
}

// stopRedisOn shuts down a redis-server answering on port.
func stopRedisOn(t *testing.T, port int) {
	t.Helper()
	if !answers(port) {
		return
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer c.Close()
	_ = c.ShutdownNoSave(context.Background()).Err() // the connection closes under the reply
	if !storetest.Poll(storetest.WaitTimeout, func() bool { return !answers(port) }) {
		t.Errorf("redis on port %d still answers after SHUTDOWN NOSAVE", port)
	}
}

func answers(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func freePort(t *testing.T) int {
	t.Helper()
	return porttest.Port(t)
}
