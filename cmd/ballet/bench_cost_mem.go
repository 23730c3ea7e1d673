package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// memSample is the process's memory with a number of turns running.
type memSample struct {
	running    int64
	heap, sys  uint64
	stack      uint64
	rssKiB     int64
	goroutines int
}

func readMem(running int64) memSample {
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return memSample{running: running, heap: m.HeapInuse, sys: m.Sys, stack: m.StackInuse, rssKiB: rss(os.Getpid()),
		goroutines: goruntime.NumGoroutine()}
}

// rss is a process's resident set in KiB, 0 when it cannot be read.
func rss(pid int) int64 {
	r, _ := procMemory(pid)
	return r
}

// benchTurnMemory holds --memory-turns turns running at once through the
// queue (one message per session, the fake model answering after
// --memory-latency, worker.concurrency raised to fit them all) on a fresh
// database, and prints the process's memory per running turn: the sample
// with the most turns running (the most goroutines among those, i.e. the
// most waiting on the model), taken after a GC, against the one before the
// first message. The fake model runs in a process of its
// own; its peak RSS is printed apart.
func benchTurnMemory(ctx context.Context, cfg Config, o turnBenchOptions, out io.Writer) error {
	fake, err := startFakeProcess(ctx, "", o.memLatency)
	if err != nil {
		return err
	}
	defer fake.close()
	bd, err := openBenchDatabase(ctx, cfg.Database, o.reuseDB)
	if err != nil {
		return err
	}
	defer bd.close(ctx, o.keepDB)
	mc := cfg
	mc.Database.URL = bd.url
	mc.Database.Migrate = mc.Database.Migrate && !bd.fresh
	mc.Worker.Concurrency = max(mc.Worker.Concurrency, o.memTurns)
	rt, err := setup(ctx, mc, "bench")
	if err != nil {
		return err
	}
	defer rt.close()
	var running atomic.Int64
	var base, peak memSample
	var maxSys uint64
	var mu sync.Mutex
	var profErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if o.memProfile != "" {
		// A finer sample than the default 512 KiB: a running turn's objects are small.
		goruntime.MemProfileRate = 16 << 10
	}
	begin := func(context.Context) error {
		goruntime.GC()
		base = readMem(0)
		wg.Go(func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			var measured time.Time
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					// A new peak: more turns running, or as many with more of
					// them waiting on the model (a goroutine each more). It is
					// measured after a GC, so that the heap is what the turns
					// hold rather than garbage, every half second at most.
					s := readMem(running.Load())
					mu.Lock()
					maxSys = max(maxSys, s.sys)
					better := s.running > peak.running || (s.running == peak.running && s.goroutines > peak.goroutines)
					mu.Unlock()
					if !better || time.Since(measured) < 500*time.Millisecond {
						continue
					}
					measured = time.Now()
					goruntime.GC()
					s = readMem(s.running)
					var err error
					if o.memProfile != "" {
						err = writeMemProfiles(o.memProfile)
					}
					mu.Lock()
					peak, profErr = s, cmp.Or(profErr, err)
					mu.Unlock()
				}
			}
		})
		return nil
	}
	_, _, err = runTurns(ctx, rt, turnWorkload{fakeURL: fake.url, mode: "queue", sessions: o.memTurns, messages: 1,
		begin: begin, running: &running})
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if profErr != nil {
		return profErr
	}
	printMemTable(out, o, mc.Worker.Concurrency, base, peak, maxSys)
	fmt.Fprintf(out, "The fake model ran in a process of its own (ballet fake-llm): peak RSS %s.\n", peakRSS(fake.pid))
	if o.memProfile != "" {
		fmt.Fprintf(out, "Heap profile at the peak: %s (go tool pprof -sample_index=inuse_space); goroutines: %s.goroutines\n",
			o.memProfile, o.memProfile)
	}
	return nil
}

// writeMemProfiles writes the heap profile (as of the last GC) to path and the goroutines,
// grouped by stack, to path.goroutines.
func writeMemProfiles(path string) error {
	write := func(p, name string, debug int) error {
		f, err := os.Create(p)
		if err != nil {
			return fmt.Errorf("bench turns: --mem-profile: %w", err)
		}
		err = pprof.Lookup(name).WriteTo(f, debug)
		return errors.Join(err, f.Close())
	}
	return errors.Join(write(path, "heap", 0), write(path+".goroutines", "goroutine", 1))
}

func printMemTable(out io.Writer, o turnBenchOptions, concurrency int, base, peak memSample, maxSys uint64) {
	fmt.Fprintf(out, "\n### Memory per running turn (queue, %d sessions × 1 message, model latency %s, worker concurrency %d)\n\n",
		o.memTurns, o.memLatency, concurrency)
	fmt.Fprint(out, "| running turns (peak) | HeapInuse at 0 | at peak | per running turn | Sys at 0 | at peak | per running turn | RSS at 0 | at peak | per running turn | goroutines per running turn |\n"+
		"|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	n := float64(max(peak.running, 1))
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	per := func(a, b uint64) string {
		if b < a {
			return "0 KiB"
		}
		return fmt.Sprintf("%.1f KiB", float64(b-a)/1024/n)
	}
	kib := func(k int64) uint64 { return uint64(max(k, 0)) << 10 }
	fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f |\n", peak.running, mib(base.heap), mib(peak.heap),
		per(base.heap, peak.heap), mib(base.sys), mib(peak.sys), per(base.sys, peak.sys),
		mib(kib(base.rssKiB)), mib(kib(peak.rssKiB)), per(kib(base.rssKiB), kib(peak.rssKiB)),
		float64(peak.goroutines-base.goroutines)/n)
	fmt.Fprintf(out, "\nGoroutine stacks (StackInuse): %s at 0, %s at the peak, %s per running turn.\n",
		mib(base.stack), mib(peak.stack), per(base.stack, peak.stack))
	fmt.Fprintf(out, "Peak: the sample (every 100 ms) with the most turns running, the most goroutines among those, taken after a GC. Sys at most %s during the phase.\n", mib(maxSys))
	fmt.Fprint(out, "One process holds the worker, the senders and the pub/sub reader: per running turn is an upper bound for a worker's.\n")
}
