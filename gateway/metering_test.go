package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestUsageTotalsEqualTheScript plays a script of known usage through JSON
// and streamed calls and checks Postgres and the metrics add up exactly.
func TestUsageTotalsEqualTheScript(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
answers:
  - content: [{text: "one"}]
    usage: {input_tokens: 101, output_tokens: 11, cache_read_input_tokens: 7, cache_creation_input_tokens: 3}
  - content: [{text: "two, streamed in small pieces"}, {tool_use: {name: list_runnable, input: {}}}]
    chunk_size: 3
    usage: {input_tokens: 202, output_tokens: 22, cache_read_input_tokens: 5}
  - content: [{text: "three"}]
    usage: {input_tokens: 303, output_tokens: 33}
  - content: [{text: "four, streamed"}]
    chunk_size: 4
    usage: {input_tokens: 404, output_tokens: 44, cache_creation_input_tokens: 9}
`))
	ctx := context.Background()
	for i, stream := range []bool{false, true, false, true} {
		if stream {
			s, err := e.client.Stream(ctx, e.principal(), hello(true))
			if err != nil {
				t.Fatal(err)
			}
			msg, err := s.Collect(nil)
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if i == 1 && (msg.StopReason != llm.StopToolUse || msg.Usage.OutputTokens != 22 || msg.Usage.InputTokens != 202) {
				t.Fatalf("assembled message = %+v", msg)
			}
			continue
		}
		if _, err := e.client.Create(ctx, e.principal(), hello(false)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// claude-test has no price: the report counts its calls unpriced.
	want := store.UsageTotal{Key: "claude-test", Requests: 4, InputTokens: 1010, OutputTokens: 110, CacheReadTokens: 12, CacheWriteTokens: 12, Unpriced: 4}
	e.usageRows(t, 4)
	got, err := e.db.UsageReport(ctx, e.project, store.UsageByModel, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("report = %+v, want %+v", got, want)
	}
	bySession, err := e.db.UsageReport(ctx, e.project, store.UsageBySession, time.Now().Add(-time.Hour))
	if err != nil || len(bySession) != 1 || bySession[0].Key != "planner:"+e.principal().Session {
		t.Fatalf("by session = %+v, %v", bySession, err)
	}
	for typ, n := range map[string]float64{"input": 1010, "output": 110, "cache_read": 12, "cache_write": 12} {
		labels := map[string]string{"organization": "acme", "project": "DEMO", "model": "claude-test", "token_type": typ}
		if got := e.counter(t, "ballet_llm_tokens_total", labels); got != n {
			t.Errorf("tokens_total{%s} = %v, want %v", typ, got, n)
		}
	}
	if got := e.counter(t, "ballet_llm_requests_total", map[string]string{"status": "200", "model": "claude-test"}); got != 4 {
		t.Errorf("requests_total = %v", got)
	}
}

func TestMissingUsageIsEstimated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(`
loop: true
answers:
  - content: [{text: "sixteen chars!!!"}]
    omit_usage: true
`))
	ctx := context.Background()
	s, err := e.client.Stream(ctx, e.principal(), hello(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Collect(nil); err != nil {
		t.Fatal(err)
	}
	rows := e.usageRows(t, 1)
	if len(rows) != 1 || !rows[0].Estimated || rows[0].OutputTokens != 4 || rows[0].InputTokens == 0 {
		t.Fatalf("usage = %+v", rows)
	}
}

// flakySink fails while down is set, then writes to the real store.
type flakySink struct {
	db    usageSink
	down  atomic.Bool
	fails atomic.Int64
}

func (f *flakySink) InsertUsage(ctx context.Context, rows []store.Usage) (int64, error) {
	if f.down.Load() {
		f.fails.Add(1)
		return 0, errors.New("connection refused")
	}
	return f.db.InsertUsage(ctx, rows)
}

func TestUsageWriterRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript))
	sink := &flakySink{db: e.db}
	sink.down.Store(true)
	reg := prometheus.NewRegistry()
	w := newUsageWriter(sink, slog.New(slog.NewTextHandler(io.Discard, nil)), 4, 10, time.Millisecond)
	m, err := newMetrics(reg, func() float64 { return float64(w.pending()) })
	if err != nil {
		t.Fatal(err)
	}
	w.m = m
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	row := func(i int) store.Usage {
		return store.Usage{RequestID: "r" + jsonInt(int64(i)), OrganizationID: e.org, ProjectID: e.project,
			Caller: "planner:x", Provider: "anthropic", Model: "m", Status: 200, InputTokens: 1}
	}
	for i := range 12 {
		w.add(row(i))
	}
	// Wait until the writer has tried (and failed) a few times.
	storetest.WaitFor(t, "three failed usage writes", func() bool { return sink.fails.Load() >= 3 })
	if got := testCounter(t, reg, "ballet_llm_usage_dropped_total"); got != 2 {
		t.Fatalf("dropped = %v, want 2 (12 rows into a buffer of 10)", got)
	}
	sink.down.Store(false)
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	var n int
	var minID string
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*), min(request_id) FROM usage`).Scan(&n, &minID); err != nil {
		t.Fatal(err)
	}
	if n != 10 || minID != "r10" && minID != "r2" {
		t.Fatalf("rows = %d (min %s), want the 10 newest", n, minID)
	}
}

func testCounter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestMeterReadsCumulativeOutput(t *testing.T) {
	t.Parallel()
	events := []sse.Event{
		{Name: "message_start", Data: []byte(`{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":4}}}`)},
		{Name: "content_block_delta", Data: []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`)},
		{Name: "message_delta", Data: []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}`)},
		{Name: "message_delta", Data: []byte(`{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}`)},
	}
	var m meter
	for _, ev := range events {
		m.observe(ev)
	}
	u, est := m.final(100)
	if est || u != (llm.Usage{InputTokens: 10, OutputTokens: 9, CacheReadInputTokens: 4}) || m.stopReason != llm.StopEndTurn {
		t.Fatalf("usage = %+v, estimated %v", u, est)
	}
}
