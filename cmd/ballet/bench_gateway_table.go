package main

import (
	"fmt"
	"io"
	"time"
)

// benchRow is one line of the table: one metric at one concurrency.
type benchRow struct {
	streams         int
	metric          string
	direct, gateway quantiles
}

// writeGatewayTable prints the rows as a Markdown table.
func writeGatewayTable(w io.Writer, rows []benchRow) {
	fmt.Fprintln(w, "| streams | metric | direct p50 | direct p95 | direct p99 | gateway p50 | gateway p95 | gateway p99 | ratio p50 | ratio p95 | ratio p99 | added p50 |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ratio := func(g, d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", float64(g)/float64(d))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %s | %s ms | %s ms | %s ms | %s ms | %s ms | %s ms | %s | %s | %s | %s ms |\n",
			r.streams, r.metric, ms(r.direct.p50), ms(r.direct.p95), ms(r.direct.p99),
			ms(r.gateway.p50), ms(r.gateway.p95), ms(r.gateway.p99),
			ratio(r.gateway.p50, r.direct.p50), ratio(r.gateway.p95, r.direct.p95), ratio(r.gateway.p99, r.direct.p99),
			ms(r.gateway.p50-r.direct.p50))
	}
}

// cpuRow is the CPU time per call of both targets at one concurrency.
type cpuRow struct {
	streams         int
	direct, gateway benchSamples
}

// writeCPUTable prints the CPU time per call of each target (this
// process's: the client in both, the gateway too in the second; plus the
// fake upstream's), their ratio, the fake's share, and the calls per
// second the rounds made.
func writeCPUTable(w io.Writer, rows []cpuRow) {
	fmt.Fprintln(w, "| streams | direct CPU/call | gateway CPU/call | ratio | added CPU/call | fake upstream's CPU/call, direct / gateway | direct calls/s | gateway calls/s |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	perCall := func(d time.Duration, s benchSamples) time.Duration { return d / time.Duration(max(len(s.total), 1)) }
	rate := func(s benchSamples) string {
		if s.wall <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", float64(len(s.total))/s.wall.Seconds())
	}
	for _, r := range rows {
		d, g := perCall(r.direct.cpu+r.direct.upstreamCPU, r.direct), perCall(r.gateway.cpu+r.gateway.upstreamCPU, r.gateway)
		ratio := "–"
		if d > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(g)/float64(d))
		}
		fmt.Fprintf(w, "| %d | %d µs | %d µs | %s | %d µs | %d / %d µs | %s | %s |\n", r.streams, d.Microseconds(), g.Microseconds(), ratio,
			(g - d).Microseconds(), perCall(r.direct.upstreamCPU, r.direct).Microseconds(),
			perCall(r.gateway.upstreamCPU, r.gateway).Microseconds(), rate(r.direct), rate(r.gateway))
	}
	fmt.Fprintln(w, "\nCPU: user + system time over each target's rounds, per call: this process's (getrusage: the client in both, "+
		"the gateway too through it) plus the fake upstream's, a process of its own as every real upstream is (its threads' "+
		"run time, /proc/<pid>/task/*/schedstat). The fake does the same work a call either way: a gap between its two "+
		"figures is the host running one target's rounds slower. Postgres's share (the usage rows, written in batches) is not counted.")
}
