package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

func init() { benchCommands["realtime"] = newBenchRealtimeCmd }

const benchRealtimeLong = `Creates a fresh database beside the configured one, starts a real
'ballet api' as a child process on it (its own Redis namespace), and
measures against it, with the load generated on the same machine:
  idle    N idle authenticated sockets held by the api (clients in helper
          processes of at most 9,900 sockets each): its RSS at 0 and at N
  fanout  --watchers sockets each watching a session of its own, --rate
          outputs/s published in all the way the worker publishes (text
          deltas, and every --stored-every-th output a stored tool call):
          publish → socket read latency
  shared  the same with every socket watching one session (--shared-rate)
  cancel  planner.cancel of a running turn (slow model) → done at the client
  first   planner.send → first text delta with an instant model, through
          the socket, next to the same turn run in-process`

// rtOptions are the flags of `ballet bench realtime`.
type rtOptions struct {
	idle, watchers, rate, sharedRate, storedEvery, turns int
	duration                                             time.Duration
	idleHold                                             time.Duration // idle sockets held with heartbeats before the steady-state reading
	memLimit                                             string        // GOMEMLIMIT of the api child; empty is none
	phases                                               map[string]bool
}

// rtFlags are the flags of `ballet bench realtime` as given.
type rtFlags struct {
	rtOptions
	config, phases string
	// The hidden helper mode that holds idle client sockets in a process
	// of its own.
	clientsOnly bool
	url, local  string
	count       int
}

func newBenchRealtimeCmd() *cobra.Command {
	var f rtFlags
	c := &cobra.Command{
		Use:     "realtime",
		Short:   "idle /rpc sockets per api process, publish→client fan-out, cancel and first-text latency",
		Long:    benchRealtimeLong,
		Example: "  ballet bench realtime --phases fanout,shared --watchers 2000 --duration 30s",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchRealtime(cmd.Context(), f, cmd.OutOrStdout())
		},
	}
	fs := c.Flags()
	addConfigFlag(c, &f.config)
	fs.IntVar(&f.idle, "idle", defaultIdleSockets(), "idle sockets (the default is what RLIMIT_NOFILE leaves room for)")
	fs.DurationVar(&f.idleHold, "idle-hold", 2*time.Minute, "how long the idle sockets exchange heartbeats before the api's steady-state RSS is read")
	fs.StringVar(&f.memLimit, "api-memory-limit", "", "GOMEMLIMIT of the api child (what 90% of a container's limits.memory gives it), e.g. 360MiB; empty is none")
	fs.IntVar(&f.watchers, "watchers", 1000, "watching sockets in the fan-out phases")
	fs.IntVar(&f.rate, "rate", 5000, "outputs published per second in all (fanout)")
	fs.IntVar(&f.sharedRate, "shared-rate", 20, "outputs published per second to the one shared session (shared)")
	fs.IntVar(&f.storedEvery, "stored-every", 20, "every N-th output is a stored tool call, the others text deltas")
	fs.IntVar(&f.turns, "turns", 200, "turns measured in the cancel and first phases")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "how long each fan-out phase publishes")
	fs.StringVar(&f.phases, "phases", "idle,fanout,shared,cancel,first", "comma-separated phases to run")
	fs.BoolVar(&f.clientsOnly, "clients-only", false, "internal: hold idle client sockets for the idle phase (the token on stdin)")
	fs.StringVar(&f.url, "url", "", "internal, with --clients-only: `URL` of the api's /rpc")
	fs.StringVar(&f.local, "local", "", "internal, with --clients-only: local IP `address` to dial from")
	fs.IntVar(&f.count, "count", 0, "internal, with --clients-only: sockets to hold")
	for _, name := range []string{"clients-only", "url", "local", "count"} {
		_ = fs.MarkHidden(name)
	}
	return c
}

// benchRealtime is `ballet bench realtime`.
func benchRealtime(ctx context.Context, f rtFlags, out io.Writer) error {
	if f.clientsOnly {
		token, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
		if err != nil {
			return fmt.Errorf("bench realtime: read the token: %w", err)
		}
		return runRealtimeClients(ctx, f.url, strings.TrimSpace(token), f.local, f.count, 64, out)
	}
	o := f.rtOptions
	o.phases = map[string]bool{}
	for p := range strings.SplitSeq(f.phases, ",") {
		switch p {
		case "idle", "fanout", "shared", "cancel", "first":
			o.phases[p] = true
		default:
			return usageError{fmt.Sprintf("--phases: unknown phase %q (idle, fanout, shared, cancel, first)", p)}
		}
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"--idle", o.idle}, {"--watchers", o.watchers}, {"--rate", o.rate}, {"--shared-rate", o.sharedRate},
		{"--stored-every", o.storedEvery}, {"--turns", o.turns}} {
		if v.n < 1 {
			return usageError{fmt.Sprintf("%s: must be at least 1, got %d", v.name, v.n)}
		}
	}
	if o.idleHold < 0 {
		return usageError{fmt.Sprintf("--idle-hold: must not be negative, got %s", o.idleHold)}
	}
	cfg, err := LoadConfig(configPath(f.config), os.Environ())
	if err != nil {
		return err
	}
	env, err := startRealtimeBench(ctx, cfg, configPath(f.config), o.memLimit)
	if err != nil {
		return err
	}
	defer env.close()
	var hard uint64
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		hard = lim.Max
	}
	fmt.Fprintf(out, "bench realtime: api pid %d on %s; GOMAXPROCS %d; %s/%s; RLIMIT_NOFILE hard %d\n\n",
		env.api.Process.Pid, env.addr, goruntime.GOMAXPROCS(0), goruntime.GOOS, goruntime.GOARCH, hard)
	if o.phases["idle"] {
		if err := env.idlePhase(ctx, out, o.idle, o.idleHold); err != nil {
			return err
		}
	}
	if o.phases["fanout"] || o.phases["shared"] {
		if err := env.fanoutPhases(ctx, out, o); err != nil {
			return err
		}
	}
	if o.phases["cancel"] || o.phases["first"] {
		if err := env.turnPhases(ctx, out, o); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\napi process: peak RSS %s; bench process: peak RSS %s\n", peakRSS(env.api.Process.Pid), peakRSS(os.Getpid()))
	return nil
}

// defaultIdleSockets is what the hard RLIMIT_NOFILE leaves for sockets
// once the api's own files (pools, listeners, logs) are counted.
func defaultIdleSockets() int {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil || lim.Max > 1<<20 {
		return maxIdleSockets
	}
	// What the api child sizes server.rpc_max_connections 0 to: the limit
	// less 1,024 other descriptors and its pools (api.CheckFileLimit), with
	// room to spare.
	return max(1, min(maxIdleSockets, int(lim.Max)-1400))
}

// maxIdleSockets is the most idle sockets the bench holds: the figure the
// goal names.
const maxIdleSockets = 20000

// realtimeBench is the fresh database, the api child process and a tenant
// whose API token the sockets use.
type realtimeBench struct {
	cfg     Config
	db      *store.DB
	drop    func()
	dbURL   string
	ns      string
	api     *exec.Cmd
	apiDone chan error
	addr    string
	metrics string
	url     string
	token   string
	caller  store.Caller
	project string
	redis   redis.UniversalClient
	// memLimit is the api child's GOMEMLIMIT; empty leaves none.
	memLimit string
}

func startRealtimeBench(ctx context.Context, cfg Config, cfgPath, memLimit string) (*realtimeBench, error) {
	dbURL, drop, err := freshDatabase(ctx, cfg.Database)
	if err != nil {
		return nil, err
	}
	e := &realtimeBench{cfg: cfg, drop: drop, dbURL: dbURL, ns: fmt.Sprintf("benchrt-%d-", time.Now().UnixNano()), memLimit: memLimit}
	dc := cfg.Database
	dc.URL = dbURL
	if e.db, err = store.Open(ctx, dc); err != nil {
		e.close()
		return nil, err
	}
	if e.caller, e.project, err = benchTenant(ctx, e.db, e.ns); err != nil {
		e.close()
		return nil, err
	}
	if e.token, _, err = e.db.CreateAPIToken(ctx, e.caller.Principal.Subject, "bench", time.Hour); err != nil {
		e.close()
		return nil, err
	}
	if e.redis, err = tasks.NewRedisClient(cfg.Redis); err != nil {
		e.close()
		return nil, err
	}
	if err := e.startAPI(ctx, cfgPath); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func freeTCPAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startAPI runs `ballet api` on the fresh database and waits until it is ready.
func (e *realtimeBench) startAPI(ctx context.Context, cfgPath string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench realtime: %w", err)
	}
	if e.addr, err = freeTCPAddr(); err != nil {
		return err
	}
	if e.metrics, err = freeTCPAddr(); err != nil {
		return err
	}
	e.url = "ws://" + e.addr + "/rpc"
	e.api = exec.Command(exe, "api")
	env := []string{"BALLET_DATABASE_URL=" + e.dbURL, "BALLET_REDIS_NAMESPACE=" + e.ns, "BALLET_SERVER_ADDR=" + e.addr,
		"BALLET_METRICS_ADDR=" + e.metrics, "BALLET_LOG_LEVEL=error", "BALLET_AUTH_MODE=token",
		// One organization holds every socket of the bench: its share is
		// the whole server.
		"BALLET_SERVER_RPC_MAX_CONNECTIONS_PER_ORGANIZATION=" + fmt.Sprint(maxIdleSockets)}
	if cfgPath != "" {
		env = append(env, "BALLET_CONFIG="+cfgPath)
	}
	// The api's memory limit is the bench's to set, never inherited.
	env = append(env, "GOMEMLIMIT="+e.memLimit)
	e.api.Env = append(os.Environ(), env...)
	e.api.Stdout, e.api.Stderr = io.Discard, os.Stderr
	if err := e.api.Start(); err != nil {
		return fmt.Errorf("bench realtime: start the api: %w", err)
	}
	e.apiDone = make(chan error, 1)
	go func() { e.apiDone <- e.api.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-e.apiDone:
			e.apiDone <- err
			return fmt.Errorf("bench realtime: the api exited before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if res, err := http.Get("http://" + e.addr + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return errors.New("bench realtime: the api was not ready within 60s")
}

func (e *realtimeBench) close() {
	if e.api != nil && e.api.Process != nil {
		_ = e.api.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.apiDone:
		case <-time.After(20 * time.Second):
			_ = e.api.Process.Kill()
			<-e.apiDone
		}
	}
	if e.redis != nil {
		_ = e.redis.Close()
	}
	if e.db != nil {
		e.db.Close()
	}
	if e.drop != nil {
		e.drop()
	}
}

// rssKiB is the api's resident set in KiB.
func (e *realtimeBench) rssKiB() int64 { return rss(e.api.Process.Pid) }

// apiMetric reads one unlabelled gauge of the api's /metrics.
func (e *realtimeBench) apiMetric(name string) float64 {
	res, err := http.Get("http://" + e.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// cpuSeconds is the CPU time (user and system) a process used so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

// settledRSS waits for the api's RSS to stop moving (at most 10 s).
func (e *realtimeBench) settledRSS() int64 {
	last := e.rssKiB()
	for range 20 {
		time.Sleep(500 * time.Millisecond)
		now := e.rssKiB()
		if now-last < 256 && last-now < 256 {
			return now
		}
		last = now
	}
	return last
}
