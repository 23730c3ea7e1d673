package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/internal/cputime"
	"github.com/balletplanner/ballet/store"
)

// benchScript is the answer every benchmarked call streams: the same as
// the gateway's Go benchmark, a few hundred characters in 16-character
// deltas with no latency of its own, so that what is measured is the relay.
const benchScript = `
name: bench
loop: true
answers:
  - content: [{text: "Here is a streamed answer of a few hundred characters, cut into small pieces the way a model streams them. It carries no tool call, just text, so that what is measured is the relaying of events: reading each one from the upstream, metering it and flushing it to the caller."}]
    chunk_size: 16
    usage: {input_tokens: 50, output_tokens: 60}
`

const benchRequestBody = `{"model":"claude-bench","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello"}]}`

func newBenchGatewayCmd() *cobra.Command {
	var path, conc, profile string
	var requests int
	c := &cobra.Command{
		Use:   "gateway",
		Short: "added latency and time to first byte of the LLM gateway vs. the upstream alone",
		Long: `Starts a fake upstream in a process of its own (ballet fake-llm --tls: a
real upstream never shares the gateway's process, and is reached over TLS,
HTTP/2 where offered, as the providers are; the fake's certificate is made
at its start and trusted by the gateway and the client alone) and an
in-process gateway
(with the configured Postgres for credentials and metering; a throwaway
organization and project are created and deleted again), then streams the
same answer directly from the fake and through the gateway at each
concurrency, and prints p50/p95/p99 of the latency and the time to first
byte of each, side by side with their ratio and the latency the gateway
adds; then the CPU time per call of each target (this process's, getrusage:
the client and, through the gateway, the gateway too; plus the fake's, its
threads' run time from /proc) and their ratio.`,
		Example: "  ballet bench gateway --concurrency 1,50,200 --requests 2000",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchGateway(cmd.Context(), path, conc, requests, profile, cmd.OutOrStdout())
		},
	}
	addConfigFlag(c, &path)
	c.Flags().StringVar(&conc, "concurrency", "1,200", "concurrent streams, comma-separated levels")
	c.Flags().IntVar(&requests, "requests", 1000, "calls per target and level (raised to the level when lower)")
	c.Flags().StringVar(&profile, "cpu-profile", "", "write CPU profiles of this process (client and gateway, not the fake) over the calls through the gateway to `PATH`.<streams>.<round>, over the direct calls to PATH.direct.<streams>.<round> (go tool pprof merges them)")
	return c
}

// benchGateway is `ballet bench gateway`.
func benchGateway(ctx context.Context, path, conc string, requests int, profile string, out io.Writer) error {
	levels, err := parseCounts("--concurrency", conc)
	if err != nil {
		return err
	}
	if requests < 1 {
		return usageError{fmt.Sprintf("--requests: must be at least 1, got %d", requests)}
	}
	db, cfg, err := openStore(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	env, err := startGatewayBench(ctx, db, cfg.Gateway)
	if err != nil {
		return fmt.Errorf("bench gateway: %w", err)
	}
	defer env.close()
	env.profile = profile

	fmt.Fprintf(out, "gateway bench: %d streamed calls per target and level, the upstream over TLS; GOMAXPROCS=%d; %s/%s\n\n",
		requests, goruntime.GOMAXPROCS(0), goruntime.GOOS, goruntime.GOARCH)
	var rows []benchRow
	var cpus []cpuRow
	for _, c := range levels {
		n := max(requests, c)
		direct, viaGateway, err := env.measure(ctx, c, n)
		if err != nil {
			return fmt.Errorf("bench gateway: %d streams: %w", c, err)
		}
		rows = append(rows,
			benchRow{streams: c, metric: "latency", direct: quantilesOf(direct.total), gateway: quantilesOf(viaGateway.total)},
			benchRow{streams: c, metric: "TTFB", direct: quantilesOf(direct.ttfb), gateway: quantilesOf(viaGateway.ttfb)})
		cpus = append(cpus, cpuRow{streams: c, direct: direct, gateway: viaGateway})
		if env.profile != "" {
			fmt.Fprintf(out, "%d streams: CPU profiles of the calls through the gateway in %s.%d.*, of the direct calls in %s.direct.%d.*\n",
				c, env.profile, c, env.profile, c)
		}
	}
	writeGatewayTable(out, rows)
	fmt.Fprintln(out)
	writeCPUTable(out, cpus)
	fmt.Fprintln(out)
	writeCountsTable(out, cpus)
	return nil
}

// gatewayBench is the fake upstream, the gateway in front of it, and the
// throwaway organization whose credential points the gateway at the fake.
type gatewayBench struct {
	db      *store.DB
	fake    *fakeProcess
	gw      *gateway.Server
	srv     *http.Server
	gwURL   string
	token   string
	orgID   string
	client  *http.Client
	cleanup []func()
	// profile is the --cpu-profile path, "" for none.
	profile string
}

func benchHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startGatewayBench(ctx context.Context, db *store.DB, base gateway.Config) (_ *gatewayBench, err error) {
	e := &gatewayBench{db: db}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.fake, err = startFakeScript(ctx, benchScript, true); err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, e.fake.close)

	// A throwaway organization and project, written directly: they are no
	// one's activity, so they leave no events and can be deleted again
	// (with their credential and usage rows) when the bench ends.
	suffix := benchHex(4)
	var projectID string
	if err := db.Pool().QueryRow(ctx, `INSERT INTO organizations (key, name) VALUES ($1, 'gateway bench') RETURNING id::text`,
		"bench-"+suffix).Scan(&e.orgID); err != nil {
		return nil, fmt.Errorf("create throwaway organization: %w", err)
	}
	e.cleanup = append(e.cleanup, func() {
		if _, err := db.Pool().Exec(context.Background(), `DELETE FROM organizations WHERE id = $1`, e.orgID); err != nil {
			fmt.Fprintf(os.Stderr, "bench gateway: delete throwaway organization bench-%s: %v\n", suffix, err)
		}
	})
	if err := db.Pool().QueryRow(ctx, `INSERT INTO projects (organization_id, key, name) VALUES ($1, $2, 'gateway bench') RETURNING id::text`,
		e.orgID, "BENCH"+strings.ToUpper(suffix[:4])).Scan(&projectID); err != nil {
		return nil, fmt.Errorf("create throwaway project: %w", err)
	}

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg := base
	// The bench's own fake upstream is the operator's: allow it.
	cfg.AllowedUpstreams = append(slices.Clone(cfg.AllowedUpstreams), e.fake.url)
	cfg.SigningKey = benchHex(32)
	cfg.CredentialsKey, cfg.CredentialsKeyFile = base64.StdEncoding.EncodeToString(key), ""
	sealer, err := gateway.NewSealer(key)
	if err != nil {
		return nil, err
	}
	cred := sealer.SealCredential(e.orgID, "", store.ProviderAnthropic, "sk-bench", e.fake.url, "bench")
	if _, err := db.PutCredential(ctx, cred); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The fake serves TLS with a certificate it made at start: the
	// gateway trusts it, and only it, through a pool given in code.
	if e.gw, err = gateway.New(cfg, db, nil, prometheus.NewRegistry(), log, gateway.WithUpstreamRootCAs(e.fake.roots)); err != nil {
		return nil, err
	}
	if err := e.gw.Start(ctx); err != nil {
		return nil, err
	}
	e.cleanup = append(e.cleanup, e.gw.Stop)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.srv = &http.Server{Handler: e.gw.Handler(), ReadHeaderTimeout: 10 * time.Second}
	// The gateway's goroutines (its connections' and, dialled from its
	// handlers, its upstream transport's) carry the profile label
	// target=gateway, so that --cpu-profile tells them from the client's:
	// go tool pprof -tagfocus target=gateway.
	go pprof.Do(context.Background(), pprof.Labels("target", "gateway"), func(context.Context) {
		e.srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on Close
	})
	e.cleanup = append(e.cleanup, func() { _ = e.srv.Close() })
	e.gwURL = "http://" + ln.Addr().String()
	if e.token, err = llm.Mint([]byte(cfg.SigningKey), llm.Principal{Subject: "bench",
		Organization: e.orgID, Project: projectID}, time.Hour); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4096, 2048
	tr.TLSClientConfig = &tls.Config{RootCAs: e.fake.roots, MinVersion: tls.VersionTLS12} // the direct calls
	e.client = &http.Client{Transport: tr}
	e.cleanup = append(e.cleanup, tr.CloseIdleConnections)
	return e, nil
}

// close undoes start in reverse order: the gateway flushes its usage rows
// before the organization they belong to is deleted.
func (e *gatewayBench) close() {
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
	e.cleanup = nil
}

// benchSamples are the latencies and times to first byte of one target,
// with the CPU time of this process and of the fake upstream's, and the
// wall time its rounds took.
type benchSamples struct {
	total, ttfb []time.Duration
	cpu, wall   time.Duration
	// upstreamCPU is the fake upstream's CPU time over the rounds.
	upstreamCPU time.Duration
	// counts are the process's allocations and system calls over the rounds.
	counts processCounts
}

// call streams one answer from base and times it.
func (e *gatewayBench) call(ctx context.Context, base string) (ttfb, total time.Duration, err error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(benchRequestBody))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	one := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, one); err != nil {
		return 0, 0, err
	}
	ttfb = time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	total = time.Since(start)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(rest, []byte("message_stop")) {
		return 0, 0, fmt.Errorf("status %d: %.300s", resp.StatusCode, append(one, rest...))
	}
	return ttfb, total, nil
}

// run makes n calls to base from c concurrent workers.
func (e *gatewayBench) run(ctx context.Context, base string, c, n int, into *benchSamples) error {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	var counts processCounts
	if into != nil {
		counts = readProcessCounts()
	}
	start, cpu, upstream := time.Now(), cputime.Process(), e.fake.cpu()
	if into != nil {
		defer func() {
			into.cpu += cputime.Process() - cpu
			into.upstreamCPU += e.fake.cpu() - upstream
			into.wall += time.Since(start)
			into.counts = into.counts.add(readProcessCounts().sub(counts))
		}()
	}
	for range c {
		wg.Go(func() {
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("target", "client")))
			for range jobs {
				ttfb, total, err := e.call(ctx, base)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
				} else if into != nil {
					into.ttfb = append(into.ttfb, ttfb)
					into.total = append(into.total, total)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// measure warms both targets up, then alternates between them in rounds,
// so that a change in the machine's load affects both alike.
func (e *gatewayBench) measure(ctx context.Context, c, n int) (direct, viaGateway benchSamples, err error) {
	for _, base := range []string{e.fake.url, e.gwURL} {
		if err := e.run(ctx, base, c, c, nil); err != nil {
			return direct, viaGateway, fmt.Errorf("warm-up: %w", err)
		}
	}
	const rounds = 5
	for r := range rounds {
		share := n/rounds + btoi(r < n%rounds)
		if share == 0 {
			continue
		}
		err := e.profiled(fmt.Sprintf("direct.%d.%d", c, r), func() error { return e.run(ctx, e.fake.url, c, share, &direct) })
		if err != nil {
			return direct, viaGateway, fmt.Errorf("direct: %w", err)
		}
		err = e.profiled(fmt.Sprintf("%d.%d", c, r), func() error { return e.run(ctx, e.gwURL, c, share, &viaGateway) })
		if err != nil {
			return direct, viaGateway, fmt.Errorf("gateway: %w", err)
		}
		if ctx.Err() != nil {
			return direct, viaGateway, ctx.Err()
		}
	}
	if len(direct.total) == 0 || len(viaGateway.total) == 0 {
		return direct, viaGateway, errors.New("no call succeeded")
	}
	return direct, viaGateway, nil
}

// profiled runs f, one round of calls, under the CPU profiler when
// --cpu-profile is set: each round in a file of its own, PATH.<streams>.<round>
// through the gateway and PATH.direct.<streams>.<round> direct (go tool
// pprof merges the files it is given), so that the client's share can be
// compared: go tool pprof -tagfocus target=client.
func (e *gatewayBench) profiled(suffix string, f func() error) error {
	if e.profile == "" {
		return f()
	}
	file, err := os.Create(e.profile + "." + suffix)
	if err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	defer file.Close()
	if err := pprof.StartCPUProfile(file); err != nil {
		return fmt.Errorf("--cpu-profile: %w", err)
	}
	err = f()
	pprof.StopCPUProfile()
	if cerr := file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--cpu-profile: %w", cerr)
	}
	return err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
