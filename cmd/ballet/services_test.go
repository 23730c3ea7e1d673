package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The tests below run deploy/dev/services.sh as `make run` and `make test`
// do on a fresh machine, each on spare ports of its own (never 5432 or 6379),
// from a copy of the script in a clone-like directory, and check that the
// servers answer on the URLs the script prints.

// scriptRun is one run of a copy of services.sh.
type scriptRun struct {
	root      string // the clone: root/deploy/dev/services.sh
	pgPort    int
	redisPort int
}

// newScriptRun copies the script into a clone whose parent directories have
// parentMode, as a clone under /home/x (0755) or /root (0700) would.
func newScriptRun(t *testing.T, parentMode os.FileMode) *scriptRun {
	t.Helper()
	s := &scriptRun{pgPort: freePort(t), redisPort: freePort(t)}
	parent := t.TempDir()
	for _, d := range []string{filepath.Dir(parent), parent} {
		if err := os.Chmod(d, parentMode); err != nil {
			t.Fatal(err)
		}
	}
	// A name of its own, so the data directory a root run may put outside
	// the clone is known to this test alone.
	s.root = filepath.Join(parent, fmt.Sprintf("clone-%d", s.pgPort))
	script, err := os.ReadFile("../../deploy/dev/services.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.root, "deploy", "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.root, "deploy", "dev", "services.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPostgresOn(t, s.pgPort, filepath.Base(s.root)) })
	t.Cleanup(func() { stopRedisOn(t, s.redisPort) })
	return s
}

// run runs the script with extra environment and arguments; it returns the
// combined output and the exit code.
func (s *scriptRun) run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.root, "deploy", "dev", "services.sh"), args...)
	cmd.Dir = s.root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "REDIS_") && !strings.HasPrefix(kv, "BALLET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PGHOST=127.0.0.1", "REDIS_HOST=127.0.0.1",
		fmt.Sprintf("PGPORT=%d", s.pgPort), fmt.Sprintf("REDIS_PORT=%d", s.redisPort))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("run services.sh: %v\n%s", err, out)
		return "", -1
	}
}

var readyLine = regexp.MustCompile(`(?m)^services: (postgres|redis) ready: (\S+)$`)

// readyURL is the URL the script printed for service, or fails t.
func readyURL(t *testing.T, out, service string) string {
	t.Helper()
	for _, m := range readyLine.FindAllStringSubmatch(out, -1) {
		if m[1] == service {
			return m[2]
		}
	}
	t.Fatalf("services.sh printed no %q ready URL; output:\n%s", service, out)
	return ""
}

// checkPostgres logs in with url, as make run and make test do, and returns
// the server's data directory. A login without the password is refused: the
// dev password is in force, not trust.
func checkPostgres(t *testing.T, url string, port int) string {
	t.Helper()
	if want := fmt.Sprintf("@127.0.0.1:%d/", port); !strings.Contains(url, want) {
		t.Fatalf("postgres URL %s does not name %s", url, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("log in with the printed URL %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var user, dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_user, current_setting('data_directory')").Scan(&user, &dataDir); err != nil {
		t.Fatal(err)
	}
	if user != "postgres" {
		t.Errorf("logged in as %q, want postgres", user)
	}
	noPassword := regexp.MustCompile(`//postgres:[^@]*@`).ReplaceAllString(url, "//postgres@")
	if c, err := pgx.Connect(ctx, noPassword); err == nil {
		c.Close(ctx)
		t.Errorf("a login without the dev password was let in (%s): the server trusts TCP", noPassword)
	}
	return dataDir
}

func checkRedis(t *testing.T, url string, port int) {
	t.Helper()
	if want := fmt.Sprintf("redis://127.0.0.1:%d/", port); !strings.HasPrefix(url, want) {
		t.Fatalf("redis URL %s does not start with %s", url, want)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping the printed URL %s: %v", url, err)
	}
}

func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (%s); run the suite as root, as CI does", why)
	}
}

func TestServicesScriptLocalBinaries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		parentMode os.FileMode
		inClone    bool // the data stays under the clone's .dev/
	}{
		{"clone readable by all", 0o755, true},
		{"clone under a mode-700 directory", 0o700, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if !tc.inClone {
				requireRoot(t, "a clone that only root can reach, with postgres run as another user")
			}
			s := newScriptRun(t, tc.parentMode)
			out, code := s.run(t, nil, "--try", "local")
			if code != 0 {
				t.Fatalf("services.sh exited %d; output:\n%s", code, out)
			}
			dataDir := checkPostgres(t, readyURL(t, out, "postgres"), s.pgPort)
			checkRedis(t, readyURL(t, out, "redis"), s.redisPort)
			inClone := strings.HasPrefix(dataDir, s.root+"/.dev/")
			if inClone != tc.inClone {
				t.Errorf("data directory %s: under the clone = %v, want %v; output:\n%s", dataDir, inClone, tc.inClone, out)
			}
			if !tc.inClone && !strings.Contains(out, "cannot reach") {
				t.Errorf("the output does not say why the data left the clone:\n%s", out)
			}

			// A second run finds both answering and starts nothing.
			again, code := s.run(t, nil)
			if code != 0 {
				t.Fatalf("second run exited %d; output:\n%s", code, again)
			}
			for _, want := range []string{
				fmt.Sprintf("postgres answers on 127.0.0.1:%d; using it", s.pgPort),
				fmt.Sprintf("redis answers on 127.0.0.1:%d; using it", s.redisPort),
			} {
				if !strings.Contains(again, want) {
					t.Errorf("second run does not say %q; output:\n%s", want, again)
				}
			}
		})
	}
}

func TestServicesScriptDistributionCluster(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		running  bool   // the cluster was started before the script ran, as apt does
		password string // role postgres has this password of its own
		says     []string
	}{
		{name: "stopped cluster",
			says: []string{"starting the distribution cluster", `set it to the dev password "ballet"`}},
		{name: "running cluster", running: true,
			says: []string{"; using it", `set it to the dev password "ballet"`}},
		{name: "role with a password of its own", running: true, password: "mine",
			says: []string{"role postgres has a password of its own, left as it is", "set BALLET_DATABASE_URL"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireRoot(t, "pg_createcluster and pg_dropcluster")
			s := newScriptRun(t, 0o755)
			cluster := createCluster(t, s.pgPort, tc.running)
			if tc.password != "" {
				setPassword(t, cluster, tc.password)
			}
			out, code := s.run(t, nil, "--try", "cluster", "postgres")
			for _, want := range tc.says {
				if !strings.Contains(out, want) {
					t.Errorf("output does not say %q:\n%s", want, out)
				}
			}
			if tc.password != "" {
				// Refused, and the role's own password still logs in.
				if code != 1 || readyLine.MatchString(out) {
					t.Errorf("exit code %d (want 1), or a ready URL printed; output:\n%s", code, out)
				}
				own := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", tc.password, s.pgPort)
				checkPostgres(t, own, s.pgPort)
				return
			}
			if code != 0 {
				t.Fatalf("services.sh exited %d; output:\n%s", code, out)
			}
			dataDir := checkPostgres(t, readyURL(t, out, "postgres"), s.pgPort)
			if want := "/var/lib/postgresql/" + cluster; dataDir != want {
				t.Errorf("data directory %s, want the cluster's %s", dataDir, want)
			}
		})
	}
}

func TestServicesScriptRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		env   []string
		args  []string
		setup func(t *testing.T, s *scriptRun)
		code  int
		says  []string
	}{
		{name: "unknown method", args: []string{"--try", "podman"}, code: 2,
			says: []string{`--try: unknown method "podman"`}},
		{name: "unknown argument", args: []string{"mysql"}, code: 2,
			says: []string{"unknown argument mysql"}},
		{name: "port not a number", env: []string{"PGPORT=54x"}, code: 2,
			says: []string{`PGPORT: "54x" is not a port number`}},
		{name: "initdb fails", args: []string{"--try", "local,apt", "postgres"}, code: 1,
			setup: func(t *testing.T, s *scriptRun) {
				// A data directory that is not empty and holds no cluster.
				if err := os.MkdirAll(filepath.Join(s.root, ".dev", "pg"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(s.root, ".dev", "pg", "stray"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			says: []string{
				"could not start postgres on 127.0.0.1:",
				"cluster: skipped (not in --try local,apt)",
				"initdb -D ", "is not empty",
				"apt-get: not needed, postgresql postgresql-contrib already installed",
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScriptRun(t, 0o755)
			if tc.setup != nil {
				tc.setup(t, s)
			}
			out, code := s.run(t, tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, out)
			}
			for _, want := range tc.says {
				if !strings.Contains(out, want) {
					t.Errorf("output does not say %q:\n%s", want, out)
				}
			}
			if readyLine.MatchString(out) {
				t.Errorf("a refused run printed a ready URL:\n%s", out)
			}
			if answers(s.pgPort) || answers(s.redisPort) {
				t.Errorf("a refused run left a server on port %d or %d", s.pgPort, s.redisPort)
			}
		})
	}
}
