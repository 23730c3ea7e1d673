package main

import (
	"fmt"
	"io"
	goruntime "runtime"
)

// processCounts are counters of the whole process: heap allocations (from
// runtime.MemStats) and read and write system calls (syscr and syscw of
// /proc/self/io, 0 where it cannot be read).
type processCounts struct {
	mallocs, allocBytes uint64
	reads, writes       uint64
}

// readProcessCounts reads the counters now. ReadMemStats stops the world
// for a moment: call it once per round, not per call.
func readProcessCounts() processCounts {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	c := processCounts{mallocs: ms.Mallocs, allocBytes: ms.TotalAlloc}
	c.reads, c.writes = syscalls()
	return c
}

func (c processCounts) sub(o processCounts) processCounts {
	return processCounts{c.mallocs - o.mallocs, c.allocBytes - o.allocBytes, c.reads - o.reads, c.writes - o.writes}
}

func (c processCounts) add(o processCounts) processCounts {
	return processCounts{c.mallocs + o.mallocs, c.allocBytes + o.allocBytes, c.reads + o.reads, c.writes + o.writes}
}

// writeCountsTable prints this process's allocations and system calls per
// call of each target, and what the gateway adds.
func writeCountsTable(w io.Writer, rows []cpuRow) {
	fmt.Fprintln(w, "| streams | direct allocs/call | gateway allocs/call | added allocs/call | added KB/call | direct reads+writes/call | gateway reads+writes/call | added syscalls/call |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	per := func(s benchSamples, v func(processCounts) uint64) float64 {
		return float64(v(s.counts)) / float64(max(len(s.total), 1))
	}
	mallocs := func(c processCounts) uint64 { return c.mallocs }
	kb := func(c processCounts) uint64 { return c.allocBytes }
	reads := func(c processCounts) uint64 { return c.reads }
	writes := func(c processCounts) uint64 { return c.writes }
	for _, r := range rows {
		d, g := r.direct, r.gateway
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.0f | %.1f | %.1f + %.1f | %.1f + %.1f | %.1f |\n", r.streams,
			per(d, mallocs), per(g, mallocs), per(g, mallocs)-per(d, mallocs), (per(g, kb)-per(d, kb))/1024,
			per(d, reads), per(d, writes), per(g, reads), per(g, writes),
			per(g, reads)+per(g, writes)-per(d, reads)-per(d, writes))
	}
	fmt.Fprintln(w, "\nAllocations (runtime.MemStats) and read/write system calls (syscr, syscw of /proc/self/io) of this "+
		"process (the client, and the gateway through it; not the fake upstream) over each target's rounds, per call; "+
		"the usage writer's Postgres batches are in the gateway's.")
}
