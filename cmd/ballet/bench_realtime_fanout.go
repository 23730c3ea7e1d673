package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// rtTurn is a session with a claimed turn whose outputs the bench publishes.
type rtTurn struct {
	session string
	fence   store.Fence
}

// startTurns creates n sessions, each with a sent and claimed turn whose
// queued and started outputs are stored and published.
func (e *realtimeBench) startTurns(ctx context.Context, pub *tasks.Publisher, n int) ([]rtTurn, error) {
	turns := make([]rtTurn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				s, err := e.db.CreateSession(ctx, e.caller, e.project, "bench")
				if err == nil {
					var res store.SendResult
					res, err = e.db.SendMessage(ctx, e.caller, s.ID, "go", "", store.QueueLimits{})
					if err == nil {
						pub.Publish(ctx, res.Queued)
						var claim store.Claim
						claim, err = e.db.ClaimTurn(ctx, res.Turn, "bench", time.Hour)
						if err == nil {
							pub.Publish(ctx, claim.Outputs...)
							turns[i] = rtTurn{session: s.ID, fence: claim.Fence}
						}
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, fmt.Errorf("bench realtime: start turns: %w", err)
	default:
	}
	return turns, nil
}

// fanoutResult is one fan-out run: latencies from publish to the socket
// read, by kind of output.
type fanoutResult struct {
	name           string
	sockets        int
	published      int64
	took           time.Duration
	text, stored   []time.Duration
	lagging        int64
	apiCPU, ownCPU float64 // CPU used while publishing, in cores
}

// watcher reads one watching socket and records each output's latency
// from the timestamp the bench put in it.
type watcher struct {
	c            *rtClient
	mu           sync.Mutex
	text, stored []time.Duration
	lagging      *atomic.Int64
	sent         *sync.Map // "session/cursor" → when a stored output was published
}

func (w *watcher) read() {
	for {
		_, b, err := w.c.ws.ReadMessage()
		if err != nil {
			return
		}
		now := time.Now()
		var f rtFrame
		if json.Unmarshal(b, &f) != nil {
			continue
		}
		switch f.Method {
		case "planner.output":
			var o rtOutput
			if json.Unmarshal(f.Params, &o) != nil {
				continue
			}
			w.record(o, now)
		case "stream.closed":
			w.lagging.Add(1)
		}
	}
}

func (w *watcher) record(o rtOutput, now time.Time) {
	if o.Type == store.OutputToolCall {
		if at, ok := w.sent.Load(o.Session + "/" + strconv.FormatInt(o.Cursor, 10)); ok {
			w.mu.Lock()
			w.stored = append(w.stored, now.Sub(at.(time.Time)))
			w.mu.Unlock()
		}
		return
	}
	ns, ok := strings.CutPrefix(o.Text, "t")
	if !ok {
		return
	}
	if i := strings.IndexByte(ns, 't'); i >= 0 {
		ns = ns[:i] // a catch-up text joining several deltas: its first
	}
	at, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return
	}
	d := now.Sub(time.Unix(0, at))
	w.mu.Lock()
	w.text = append(w.text, d)
	w.mu.Unlock()
}

// fanoutPhases runs the own-session and the shared-session fan-outs.
func (e *realtimeBench) fanoutPhases(ctx context.Context, out io.Writer, o rtOptions) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub := tasks.NewPublisher(e.redis, tasks.Names{Namespace: e.ns}, log)
	var results []fanoutResult
	if o.phases["fanout"] {
		turns, err := e.startTurns(ctx, pub, o.watchers)
		if err != nil {
			return err
		}
		r, err := e.fanout(ctx, pub, turns, turns, o.rate, o.storedEvery, o.duration)
		if err != nil {
			return err
		}
		r.name = "own session each"
		results = append(results, r)
	}
	if o.phases["shared"] {
		turns, err := e.startTurns(ctx, pub, 1)
		if err != nil {
			return err
		}
		watched := make([]rtTurn, o.watchers)
		for i := range watched {
			watched[i] = turns[0]
		}
		r, err := e.fanout(ctx, pub, turns, watched, o.sharedRate, o.storedEvery, o.duration)
		if err != nil {
			return err
		}
		r.name = "one shared session"
		results = append(results, r)
	}
	fmt.Fprintf(out, "publish → socket read (JSON subprotocol; tasks.Publisher in the bench process, every %d-th output a stored tool call, the others text deltas)\n\n", o.storedEvery)
	fmt.Fprintf(out, "| watchers | sockets | published/s | frames/s | kind | frames | p50 | p90 | p99 | max | lagging | api CPU | bench CPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		frames := len(r.text) + len(r.stored)
		for _, k := range []struct {
			kind string
			d    []time.Duration
		}{{"text", r.text}, {"stored", r.stored}, {"all", append(slices.Clone(r.text), r.stored...)}} {
			s := slices.Clone(k.d)
			slices.Sort(s)
			fmt.Fprintf(out, "| %s | %d | %.0f | %.0f | %s | %d | %s ms | %s ms | %s ms | %s ms | %d | %.0f%% | %.0f%% |\n", r.name, r.sockets,
				float64(r.published)/r.took.Seconds(), float64(frames)/r.took.Seconds(), k.kind, len(s),
				ms(percentile(s, 50)), ms(percentile(s, 90)), ms(percentile(s, 99)), ms(slices.Max(append(s, 0))), r.lagging,
				100*r.apiCPU, 100*r.ownCPU)
		}
	}
	fmt.Fprintln(out)
	return nil
}

// fanout opens one watching socket per entry of watched, then publishes to
// the sessions of turns at rate for d, each publisher goroutine owning a
// share of the sessions so that each session's outputs go out in order.
func (e *realtimeBench) fanout(ctx context.Context, pub *tasks.Publisher, turns, watched []rtTurn, rate, storedEvery int, d time.Duration) (fanoutResult, error) {
	var lagging atomic.Int64
	var sent sync.Map
	ws := make([]*watcher, len(watched))
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(watched) {
					return
				}
				c, err := dialRT(ctx, e.url, e.token, "")
				if err == nil {
					_, err = c.call("planner.watch", map[string]any{"subscription": "s", "session": watched[i].session, "from_cursor": 2})
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ws[i] = &watcher{c: c, lagging: &lagging, sent: &sent}
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.c.ws.Close()
			}
		}
	}()
	if err, _ := firstErr.Load().(error); err != nil {
		return fanoutResult{}, fmt.Errorf("bench realtime: open watchers: %w", err)
	}
	var readers sync.WaitGroup
	for _, w := range ws {
		readers.Add(1)
		go func() { defer readers.Done(); w.read() }()
	}
	api0, own0 := cpuSeconds(e.api.Process.Pid), cpuSeconds(os.Getpid())
	published, err := e.publishAt(ctx, pub, turns, rate, storedEvery, d, &sent)
	if err != nil {
		return fanoutResult{}, err
	}
	apiCPU, ownCPU := cpuSeconds(e.api.Process.Pid)-api0, cpuSeconds(os.Getpid())-own0
	time.Sleep(time.Second) // the last outputs arrive
	for _, w := range ws {
		w.c.ws.Close()
	}
	readers.Wait()
	r := fanoutResult{sockets: len(ws), published: published, took: d, lagging: lagging.Load(),
		apiCPU: apiCPU / d.Seconds(), ownCPU: ownCPU / d.Seconds()}
	for _, w := range ws {
		r.text = append(r.text, w.text...)
		r.stored = append(r.stored, w.stored...)
	}
	return r, nil
}

// publishAt publishes rate outputs per second in all for d, spread over the
// turns, from publisher goroutines that each own a share of them.
func (e *realtimeBench) publishAt(ctx context.Context, pub *tasks.Publisher, turns []rtTurn, rate, storedEvery int, d time.Duration, sent *sync.Map) (int64, error) {
	g := max(1, min(len(turns), 50, rate/20))
	var published atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	deadline := time.Now().Add(d)
	for k := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []rtTurn
			for i := k; i < len(turns); i += g {
				mine = append(mine, turns[i])
			}
			every := time.Duration(float64(time.Second) * float64(g) / float64(rate))
			start := time.Now().Add(every * time.Duration(k) / time.Duration(g))
			sentText := map[string]int64{} // bytes of each session's round text
			for n := 0; ; n++ {
				at := start.Add(every * time.Duration(n))
				if at.After(deadline) {
					return
				}
				time.Sleep(time.Until(at)) // behind schedule, at once
				tr := mine[n%len(mine)]
				if (n/len(mine))%storedEvery == storedEvery-1 {
					stored, err := e.db.AppendOutputs(ctx, tr.fence, store.Output{Turn: tr.fence.Turn, Type: store.OutputToolCall,
						Tool: "list_items", ToolUseID: fmt.Sprintf("toolu_%d", n), Input: []byte(`{}`)})
					if err != nil {
						errs <- err
						return
					}
					sent.Store(stored[0].Session+"/"+strconv.FormatInt(stored[0].Cursor, 10), time.Now())
					pub.Publish(ctx, stored...)
				} else {
					stamp := "t" + strconv.FormatInt(time.Now().UnixNano(), 10)
					n, err := pub.PublishText(ctx, tasks.TextDelta{Session: tr.session, Turn: tr.fence.Turn,
						Attempt: tasks.LiveAttempt(tr.fence.Token, 0), Offset: sentText[tr.session], Text: stamp})
					if err != nil {
						errs <- err
						return
					}
					sentText[tr.session] = max(n, 0)
				}
				published.Add(1)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, fmt.Errorf("bench realtime: publish: %w", err)
	default:
	}
	return published.Load(), nil
}
