package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
	"github.com/balletplanner/ballet/tools"
	"github.com/balletplanner/ballet/worker"
)

// The fake models of the turn phases: one that answers at once, and one
// that streams a long answer slowly, to be cancelled while it runs.
const (
	instantModel = "loop: true\nanswers:\n  - content:\n      - text: ok\n"
	slowModel    = "loop: true\nanswers:\n  - chunk_size: 4\n    chunk_latency: 50ms\n    content:\n      - text: \"%s\"\n"
)

// rtWorker is a worker in the bench process on the api's queue and
// namespace, calling a fake model.
type rtWorker struct {
	w       *worker.Worker
	fake    *fakellm.Server
	started bool
}

// startWorker builds the worker; started, it takes turns from the queue,
// else it only runs the turns given to RunTurn.
func (e *realtimeBench) startWorker(ctx context.Context, script string, start bool) (*rtWorker, error) {
	fake := fakellm.New(fakellm.MustParse(script))
	if err := fake.Start(); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	names := tasks.Names{Namespace: e.ns}
	queue := tasks.NewQueue(e.redis, names, time.Hour)
	reg, err := tools.Planner(log)
	if err != nil {
		fake.Close()
		return nil, err
	}
	pc := e.cfg.Planner
	pc.Skill = ""
	w, err := worker.New(e.cfg.Worker, pc, e.cfg.Worker.ShutdownTimeout, worker.Deps{DB: e.db, Redis: e.redis,
		Queue: queue, Publisher: tasks.NewPublisher(e.redis, names, log), Tools: reg, Log: log,
		Model: worker.GatewayModel{Client: llm.NewClient(fake.URL(), []byte("bench"), nil)}})
	if err != nil {
		fake.Close()
		return nil, err
	}
	if !start {
		return &rtWorker{w: w, fake: fake}, nil
	}
	if err := w.Start(ctx); err != nil {
		fake.Close()
		return nil, err
	}
	return &rtWorker{w: w, fake: fake, started: true}, nil
}

func (w *rtWorker) stop() {
	if w.fake == nil {
		return
	}
	defer func() { w.fake = nil }()
	if w.started {
		w.w.Stop()
	}
	w.fake.Close()
}

// turnSocket is a socket watching one session, its outputs on a channel.
type turnSocket struct {
	c       *rtClient
	session string
	outs    chan rtOutput
}

func (e *realtimeBench) turnSocket(ctx context.Context) (*turnSocket, error) {
	s, err := e.db.CreateSession(ctx, e.caller, e.project, "bench")
	if err != nil {
		return nil, err
	}
	c, err := dialRT(ctx, e.url, e.token, "")
	if err != nil {
		return nil, err
	}
	if _, err := c.call("planner.watch", map[string]any{"subscription": "s", "session": s.ID}); err != nil {
		c.ws.Close()
		return nil, fmt.Errorf("bench realtime: watch: %w", err)
	}
	ts := &turnSocket{c: c, session: s.ID, outs: make(chan rtOutput, 4096)}
	go func() {
		defer close(ts.outs)
		for {
			_, b, err := c.ws.ReadMessage()
			if err != nil {
				return
			}
			var f rtFrame
			var o rtOutput
			if json.Unmarshal(b, &f) == nil && f.Method == "planner.output" && json.Unmarshal(f.Params, &o) == nil {
				ts.outs <- o
			}
		}
	}()
	return ts, nil
}

// await reads outputs until one of the type (and turn, when set) arrives.
func (ts *turnSocket) await(ctx context.Context, typ string) (rtOutput, error) {
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		select {
		case o, ok := <-ts.outs:
			if !ok {
				return rtOutput{}, fmt.Errorf("bench realtime: the socket closed waiting for %s", typ)
			}
			if o.Type == typ {
				return o, nil
			}
		case <-timeout.C:
			return rtOutput{}, fmt.Errorf("bench realtime: no %s output within a minute", typ)
		case <-ctx.Done():
			return rtOutput{}, ctx.Err()
		}
	}
}

// rtTurnRow is one line of the turn table.
type rtTurnRow struct {
	what string
	d    []time.Duration
	note string
}

// turnPhases measures cancel → done and send → first text.
func (e *realtimeBench) turnPhases(ctx context.Context, out io.Writer, o rtOptions) error {
	var rows []rtTurnRow
	if o.phases["cancel"] {
		d, reasons, err := e.cancelPhase(ctx, o.turns)
		if err != nil {
			return err
		}
		rows = append(rows, rtTurnRow{"planner.cancel of a streaming turn → done at the socket", d, reasons})
	}
	if o.phases["first"] {
		ws, direct, err := e.firstTextPhase(ctx, o.turns)
		if err != nil {
			return err
		}
		rows = append(rows, rtTurnRow{"planner.send → first text at the socket (queue, worker)", ws, ""},
			rtTurnRow{"in-process: SendMessage + RunTurn → first text on Redis", direct, ""})
		if len(ws) > 0 && len(direct) > 0 {
			a, b := quantilesOf(ws), quantilesOf(direct)
			rows[len(rows)-2].note = fmt.Sprintf("p50 %.1f× in-process", float64(a.p50)/float64(max(b.p50, 1)))
		}
	}
	fmt.Fprintf(out, "turns (worker in the bench process on the api's queue, fake model; one turn at a time)\n\n")
	fmt.Fprintf(out, "| what | turns | p50 | p90 | p99 | max | note |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		s := slices.Clone(r.d)
		slices.Sort(s)
		fmt.Fprintf(out, "| %s | %d | %s ms | %s ms | %s ms | %s ms | %s |\n", r.what, len(s), ms(percentile(s, 50)),
			ms(percentile(s, 90)), ms(percentile(s, 99)), ms(slices.Max(append(s, 0))), r.note)
	}
	return nil
}

// cancelPhase sends turns to a slowly streaming model and cancels each
// once its first text arrived.
func (e *realtimeBench) cancelPhase(ctx context.Context, n int) ([]time.Duration, string, error) {
	w, err := e.startWorker(ctx, fmt.Sprintf(slowModel, strings.Repeat("slow ", 200)), true)
	if err != nil {
		return nil, "", err
	}
	defer w.stop()
	ts, err := e.turnSocket(ctx)
	if err != nil {
		return nil, "", err
	}
	defer ts.c.ws.Close()
	var d []time.Duration
	reasons := map[string]int{}
	for range n {
		if err := ts.c.request("planner.send", map[string]any{"session": ts.session, "text": "go"}); err != nil {
			return nil, "", err
		}
		if _, err := ts.await(ctx, store.OutputText); err != nil {
			return nil, "", err
		}
		start := time.Now()
		if err := ts.c.request("planner.cancel", map[string]any{"session": ts.session}); err != nil {
			return nil, "", err
		}
		done, err := ts.await(ctx, store.OutputDone)
		if err != nil {
			return nil, "", err
		}
		d = append(d, time.Since(start))
		reasons[done.Text]++
	}
	var note []string
	for r, k := range reasons {
		note = append(note, fmt.Sprintf("done %q ×%d", r, k))
	}
	slices.Sort(note)
	return d, strings.Join(note, ", "), nil
}

// firstTextPhase runs turns with an instant model through the socket and
// then in-process, and times the first text delta of each.
func (e *realtimeBench) firstTextPhase(ctx context.Context, n int) ([]time.Duration, []time.Duration, error) {
	w, err := e.startWorker(ctx, instantModel, true)
	if err != nil {
		return nil, nil, err
	}
	defer w.stop()
	ts, err := e.turnSocket(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer ts.c.ws.Close()
	var viaSocket, direct []time.Duration
	for range n {
		start := time.Now()
		if err := ts.c.request("planner.send", map[string]any{"session": ts.session, "text": "go"}); err != nil {
			return nil, nil, err
		}
		if _, err := ts.await(ctx, store.OutputText); err != nil {
			return nil, nil, err
		}
		viaSocket = append(viaSocket, time.Since(start))
		if _, err := ts.await(ctx, store.OutputDone); err != nil {
			return nil, nil, err
		}
	}
	w.stop()
	if w, err = e.startWorker(ctx, instantModel, false); err != nil {
		return nil, nil, err
	}
	defer w.stop()
	s, err := e.db.CreateSession(ctx, e.caller, e.project, "bench")
	if err != nil {
		return nil, nil, err
	}
	sub := e.redis.Subscribe(ctx, tasks.Names{Namespace: e.ns}.SessionChannel(s.ID))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return nil, nil, err
	}
	msgs := sub.Channel()
	for range n {
		start := time.Now()
		res, err := e.db.SendMessage(ctx, e.caller, s.ID, "go", "", store.QueueLimits{})
		if err != nil {
			return nil, nil, err
		}
		first := make(chan time.Duration, 1)
		go func() {
			for m := range msgs {
				var o store.Output
				if json.Unmarshal([]byte(m.Payload), &o) == nil && o.Type == store.OutputText {
					first <- time.Since(start)
					return
				}
			}
		}()
		if err := w.w.RunTurn(ctx, s.ID, res.Turn); err != nil {
			return nil, nil, err
		}
		select {
		case d := <-first:
			direct = append(direct, d)
		case <-time.After(time.Minute):
			return nil, nil, fmt.Errorf("bench realtime: no text from the in-process turn within a minute")
		}
	}
	return viaSocket, direct, nil
}
