package main

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// inView is whether the turn block of turn %q is on the screen.
const inView = `(() => { const r = document.querySelector('.transcript > .turn-block[data-turn=%q]')?.getBoundingClientRect();
  return !!r && r.bottom > 0 && r.top < window.innerHeight; })()`

// topOf is where the turn block of turn %q is on the screen.
const topOf = `document.querySelector('.transcript > .turn-block[data-turn=%q]').getBoundingClientRect().top`

// shownIDs is the turn of each turn block on the page, in page order.
const shownIDs = `JSON.stringify([...document.querySelectorAll('.transcript > .turn-block')].map(b => b.dataset.turn))`

// A session with more turns than the window: the page shows the last
// transcriptWindow turn blocks; "Show earlier turns", pressed with the
// keyboard, and scrolling to the top show the earlier ones, in order, with
// the blocks on the screen kept where they were; an early turn's human
// message and changeset card are back once shown. A new turn keeps the
// page where the human reads, and once they are back at the end it slides
// the window and keeps the end in view.
func TestWebTranscriptShowsEarlierTurns(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	script, _, release := browserScript(t)
	p, token, _ := startDemoServe(t, script)
	base := "http://" + p.addr
	pg := page{t: t, ctx: ctx, p: p}
	console := pg.watchConsole()
	pg.run("open sign-in", chromedp.Navigate(base+"/"))
	pg.signIn(token)
	pg.newSession(base, "A long session")

	// The first turn, a real one, proposes a changeset.
	first := "Customers keep asking for password reset. What should we plan?"
	card := `.transcript article.changeset[data-status=proposed]`
	must(t, os.WriteFile(release, nil, 0o600))
	pg.run("send", chromedp.SendKeys(chromedp.CSS(`textarea[aria-label="Message"]`), first+kb.Enter))
	pg.until("the first turn ends with its changeset", fmt.Sprintf(`!document.querySelector('.turn') && !!document.querySelector(%q)`, card))
	eval[any](pg, turnScript)
	const synthetic = 70
	for i := 1; i <= synthetic; i++ {
		eval[shownTurns](pg, fmt.Sprintf(`__balletTurn(%d)`, i), chromedp.EvalAwaitPromise)
	}
	ids := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, fmt.Sprintf("synthetic-%d", i))
		}
		return out
	}
	shown := func(what string, want []string) {
		t.Helper()
		b, err := json.Marshal(want)
		must(t, err)
		pg.until(what, fmt.Sprintf(`%s === %q`, shownIDs, b))
	}
	shown("the last turns only", ids(synthetic-transcriptWindow+1, synthetic))
	if eval[bool](pg, fmt.Sprintf(`!!document.querySelector(%q)`, card)) {
		t.Fatal("the first turn's changeset card is on the page with the first turn out of the window")
	}
	pg.until("the page at its end", `document.querySelector('section.session').getBoundingClientRect().bottom <= window.innerHeight + 4`)

	// The button, from the keyboard: the blocks shown stay where they are.
	button := `document.querySelector('section.session .earlier button')`
	if got, want := eval[string](pg, button+`.innerText`), fmt.Sprintf("Show earlier turns (%d more)", synthetic+1-transcriptWindow); got != want {
		t.Fatalf("the button reads %q, want %q", got, want)
	}
	top := fmt.Sprintf("synthetic-%d", synthetic-transcriptWindow+1)
	before := eval[float64](pg, fmt.Sprintf(topOf, top))
	eval[any](pg, button+`.focus({ preventScroll: true })`)
	pg.run("press Enter on the button", chromedp.KeyEvent(kb.Enter))
	shown("the window's worth of earlier turns", ids(synthetic-2*transcriptWindow+1, synthetic))
	if after := eval[float64](pg, fmt.Sprintf(topOf, top)); after < before-2 || after > before+2 {
		t.Fatalf("the block at the window's top moved on the screen from %.0f to %.0f", before, after)
	}

	// Scrolling to the top shows the rest, the block that was at the top
	// stays in view.
	top = fmt.Sprintf("synthetic-%d", synthetic-2*transcriptWindow+1)
	eval[any](pg, `window.scrollTo(0, 0)`)
	pg.until("every turn", fmt.Sprintf(`document.querySelectorAll('.transcript > .turn-block').length === %d && !document.querySelector('section.session .earlier')`, synthetic+1))
	if !eval[bool](pg, fmt.Sprintf(inView, top)) {
		t.Fatalf("the block at the top, %s, is out of view once the earlier turns are shown", top)
	}
	var texts []string
	texts = append(texts, first)
	for i := 1; i <= synthetic; i++ {
		texts = append(texts, fmt.Sprintf("Question %d: what should we plan next for onboarding?", i))
	}
	want, err := json.Marshal(texts)
	must(t, err)
	pg.until("the human's messages, in order", fmt.Sprintf(`%s === %q`, userTexts, want))
	pg.until("the first turn's changeset card", fmt.Sprintf(`!!%s?.querySelector(%q)`, fmt.Sprintf(blockOf, first), "article.changeset[data-status=proposed] .op"))

	// A new turn while the human reads: nothing leaves, nothing moves.
	before = eval[float64](pg, fmt.Sprintf(topOf, top))
	eval[shownTurns](pg, fmt.Sprintf(`__balletTurn(%d)`, synthetic+1), chromedp.EvalAwaitPromise)
	if n := eval[int](pg, `document.querySelectorAll('.transcript > .turn-block').length`); n != synthetic+2 {
		t.Fatalf("a new turn while the human reads left %d blocks, want %d", n, synthetic+2)
	}
	if after := eval[float64](pg, fmt.Sprintf(topOf, top)); after < before-2 || after > before+2 {
		t.Fatalf("a new turn while the human reads moved the block at the top from %.0f to %.0f", before, after)
	}

	// Back at the end, a new turn slides the window and keeps the end in view.
	eval[any](pg, `(async () => { window.scrollTo(0, document.documentElement.scrollHeight);
		await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))); })()`, chromedp.EvalAwaitPromise)
	eval[shownTurns](pg, fmt.Sprintf(`__balletTurn(%d)`, synthetic+2), chromedp.EvalAwaitPromise)
	shown("the window again", ids(synthetic+2-transcriptWindow+1, synthetic+2))
	pg.until("the page at its end", `document.querySelector('section.session').getBoundingClientRect().bottom <= window.innerHeight + 4`)
	console.none(pg, "in a long session")
}
