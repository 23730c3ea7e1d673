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

// writeCPUTable prints the process's CPU time per call of each target (the
// client and the fake upstream in both, the gateway too in the second),
// their ratio, and the calls per second the rounds made.
func writeCPUTable(w io.Writer, rows []cpuRow) {
	fmt.Fprintln(w, "| streams | direct CPU/call | gateway CPU/call | ratio | added CPU/call | direct calls/s | gateway calls/s |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	perCall := func(s benchSamples) time.Duration { return s.cpu / time.Duration(max(len(s.total), 1)) }
	rate := func(s benchSamples) string {
		if s.wall <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", float64(len(s.total))/s.wall.Seconds())
	}
	for _, r := range rows {
		d, g := perCall(r.direct), perCall(r.gateway)
		ratio := "–"
		if d > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(g)/float64(d))
		}
		fmt.Fprintf(w, "| %d | %d µs | %d µs | %s | %d µs | %s | %s |\n", r.streams, d.Microseconds(), g.Microseconds(), ratio,
			(g - d).Microseconds(), rate(r.direct), rate(r.gateway))
	}
	fmt.Fprintln(w, "\nCPU: this process's user + system time (getrusage) over each target's rounds, per call: the client and the "+
		"fake upstream in both, the gateway too through it. Postgres's share (the usage rows, written in batches) is not counted.")
}
