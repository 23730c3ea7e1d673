package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
)

// turnScript defines window.__balletTurn(i): one whole turn applied to the
// open session as the socket would deliver it (the human's message queued,
// started, a streamed round, a tool call and its result, a second streamed
// round in Markdown, the stored message, done), each output in a task of
// its own, then a frame. It returns what the page shows then: how many
// turn blocks, the last one's turn, and the session's turns (data-turns).
const turnScript = `window.__balletTurn = async (i) => {
  const T = 'synthetic-' + i;
  let c = window.__balletCursor ?? 1000000;
  const out = (o) => window.__balletOutput(Object.assign({ session: '', turn: T }, o));
  const tick = () => new Promise((r) => setTimeout(r, 0));
  const enc = new TextEncoder();
  const round = async (after, parts) => {
    let text = '';
    for (const p of parts) {
      text += p;
      out({ type: 'text', text: p, attempt: 1, text_after: after, text_end: enc.encode(text).length });
      await tick();
    }
    return text;
  };
  out({ type: 'queued', cursor: ++c, content: [{ type: 'text', text: 'Question ' + i + ': what should we plan next for onboarding?' }] });
  await tick();
  out({ type: 'started', cursor: ++c });
  await tick();
  const first = await round(c, ['Let me ', 'look at ', 'the board ', 'first.']);
  out({ type: 'message', cursor: ++c, role: 'assistant', content: [{ type: 'text', text: first }] });
  out({ type: 'tool_call', cursor: ++c, tool: 'list_items', tool_use_id: 'tu-' + i, input: { project: 'DEMO', status: 'open' } });
  await tick();
  out({ type: 'tool_result', cursor: ++c, tool_use_id: 'tu-' + i, text: JSON.stringify({ items: [{ key: 'DEMO-1', title: 'Sign-in' }] }) });
  await tick();
  const parts = ['**Plan** for ', 'turn ' + i + ':\n\n', '- Add a ', '*reset* link ', 'to sign-in\n', '- Send the ', 'email with ', 'a one-time ', 'token\n', '- Expire it ', 'after _30 min_\n\n',
    'Then ', 'we measure ', 'how many ', 'users finish ', 'the flow.'];
  const second = await round(c, parts);
  out({ type: 'message', cursor: ++c, role: 'assistant', content: [{ type: 'text', text: second }] });
  out({ type: 'done', cursor: ++c, text: 'end_turn' });
  window.__balletCursor = c;
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const blocks = document.querySelectorAll('.transcript > .turn-block');
  return { shown: blocks.length, last: blocks[blocks.length - 1]?.dataset.turn ?? '',
    turns: Number(document.querySelector('section.session').dataset.turns) };
}`

// transcriptWindow is how many turn blocks a session's page shows
// (api/web/src/turnwindow.ts, WINDOW).
const transcriptWindow = 30

// shownTurns is what a session's page shows after a synthetic turn.
type shownTurns struct {
	Shown int    `json:"shown"`
	Last  string `json:"last"`
	Turns int    `json:"turns"`
}

// rendererMetrics reads the renderer's main-thread CPU (thread ticks) by
// kind, in seconds.
func rendererMetrics(ctx context.Context) (map[string]float64, error) {
	res, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (performance.GetMetricsResult, error) {
		return cdp.Call(ctx, t, performance.GetMetrics, cdp.Empty{})
	})
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, x := range res.Metrics {
		m[x.Name] = x.Value
	}
	return m, nil
}

// TestWebTranscriptCostPerTurn: a session's page does the same work for a
// turn whatever came before it. It shows the last transcriptWindow turn
// blocks, however many turns the session has, and a delta renders the
// Markdown of the live answer only, not of every entry before it. It also
// reads the renderer's CPU per turn from turn 1 to turn 100 and logs it
// (docs/benchmarks.md, "Web app"); time is never asserted.
func TestWebTranscriptCostPerTurn(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	script, _, _ := browserScript(t)
	p, token, _ := startDemoServe(t, script)
	base := "http://" + p.addr
	pg := page{t: t, ctx: ctx, p: p}
	pg.run("open sign-in", chromedp.Navigate(base+"/"))
	pg.signIn(token)
	pg.newSession(base, "Long session")
	eval[any](pg, turnScript)
	if err := chromedp.Do(ctx, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, performance.Enable, performance.EnableParams{TimeDomain: performance.EnableTimeDomainThreadTicks})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatal(err)
	}
	const turns = 100
	cpu := make([]float64, turns+1)
	for i := 1; i <= turns; i++ {
		m0, err := rendererMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := eval[shownTurns](pg, fmt.Sprintf(`__balletTurn(%d)`, i), chromedp.EvalAwaitPromise)
		if want := (shownTurns{Shown: min(i, transcriptWindow), Last: fmt.Sprintf("synthetic-%d", i), Turns: i}); got != want {
			t.Fatalf("after turn %d the page shows %+v, want %+v", i, got, want)
		}
		m1, err := rendererMetrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cpu[i] = m1["TaskDuration"] - m0["TaskDuration"]
	}
	mean := func(from, to int) float64 {
		var s float64
		for i := from; i <= to; i++ {
			s += cpu[i]
		}
		return s / float64(to-from+1)
	}
	early, late := mean(1, 10), mean(turns-9, turns)
	t.Logf("renderer main-thread CPU per turn: turns 1-10 %.1f ms, turns %d-%d %.1f ms, ratio %.2f (goal ≤ 1.2)",
		early*1000, turns-9, turns, late*1000, late/early)

	// One more delta with 100 turns above it renders one entry's Markdown.
	renders := eval[int](pg, `(async () => {
		const before = window.__balletMarkdownRenders ?? 0;
		window.__balletOutput({ session: '', turn: 'synthetic-extra', type: 'started', cursor: ++window.__balletCursor });
		window.__balletOutput({ session: '', turn: 'synthetic-extra', type: 'text', text: 'One more', attempt: 1, text_after: window.__balletCursor, text_end: 8 });
		await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
		return (window.__balletMarkdownRenders ?? 0) - before;
	})()`, chromedp.EvalAwaitPromise)
	if renders != 1 {
		t.Errorf("a delta after %d turns rendered Markdown %d times, want once (the live answer's)", turns, renders)
	}
}
