package main

import (
	"context"
	"fmt"
	"io"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"
)

// memSample is the process's memory with a number of turns running.
type memSample struct {
	running    int64
	heap, sys  uint64
	goroutines int
}

func readMem(running int64) memSample {
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return memSample{running: running, heap: m.HeapInuse, sys: m.Sys, goroutines: goruntime.NumGoroutine()}
}

// benchTurnMemory holds --memory-turns turns running at once through the
// queue (one message per session, the fake model answering after
// --memory-latency, worker.concurrency raised to fit them all) on a fresh
// database, and prints the process's memory per running turn: the sample
// with the most turns running (the largest heap among those) against the
// one before the first message.
func benchTurnMemory(ctx context.Context, cfg Config, o turnBenchOptions, out io.Writer) error {
	fake, err := startBenchFake("", o.memLatency)
	if err != nil {
		return err
	}
	defer fake.Close()
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
	stop := make(chan struct{})
	var wg sync.WaitGroup
	begin := func(context.Context) error {
		goruntime.GC()
		base = readMem(0)
		wg.Go(func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					s := readMem(running.Load())
					mu.Lock()
					if s.running > peak.running || (s.running == peak.running && s.heap > peak.heap) {
						peak = s
					}
					maxSys = max(maxSys, s.sys)
					mu.Unlock()
				}
			}
		})
		return nil
	}
	_, _, err = runTurns(ctx, rt, turnWorkload{fakeURL: fake.URL(), mode: "queue", sessions: o.memTurns, messages: 1,
		begin: begin, running: &running})
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	printMemTable(out, o, mc.Worker.Concurrency, base, peak, maxSys)
	return nil
}

func printMemTable(out io.Writer, o turnBenchOptions, concurrency int, base, peak memSample, maxSys uint64) {
	fmt.Fprintf(out, "\n### Memory per running turn (queue, %d sessions × 1 message, model latency %s, worker concurrency %d)\n\n",
		o.memTurns, o.memLatency, concurrency)
	fmt.Fprint(out, "| running turns (peak) | HeapInuse at 0 | at peak | per running turn | Sys at 0 | at peak | per running turn | goroutines per running turn |\n"+
		"|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	n := float64(max(peak.running, 1))
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	per := func(a, b uint64) string {
		if b < a {
			return "0 KiB"
		}
		return fmt.Sprintf("%.1f KiB", float64(b-a)/1024/n)
	}
	fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %s | %.1f |\n", peak.running, mib(base.heap), mib(peak.heap),
		per(base.heap, peak.heap), mib(base.sys), mib(peak.sys), per(base.sys, peak.sys),
		float64(peak.goroutines-base.goroutines)/n)
	fmt.Fprintf(out, "\nPeak: the sample (every 100 ms) with the most turns running, the largest heap among those. Sys at most %s during the phase.\n", mib(maxSys))
	fmt.Fprint(out, "One process holds the worker, the senders, the fake model's open answers and the pub/sub reader: per running turn is an upper bound for a worker's.\n")
}
