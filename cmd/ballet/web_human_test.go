package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// userTexts is the human's message of each turn block, in page order.
const userTexts = `JSON.stringify([...document.querySelectorAll('.transcript > .turn-block')].map(b => (b.querySelector('.msg.user')?.innerText ?? '').split('\n')[0].trim()))`

// blockOf is the turn block whose human message is %q.
const blockOf = `[...document.querySelectorAll('.transcript > .turn-block')].find(b => (b.querySelector('.msg.user')?.innerText ?? '').startsWith(%q))`

// The human's side of a session in a real browser: the human's own
// messages show, live and after a reload; quick sends are stored in the
// order typed; each turn is its own block, so a message queued while a turn
// runs, and its cancellation, stay out of the running answer; what is sent
// while the socket is down waits and goes once it is back; Stop ends the
// running turn and the next one runs; and a tool call left without a
// result when its turn ends no longer shows as running.
func TestWebAppShowsTheHumansSide(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	script, _, release := browserScript(t)
	p, token, _ := startDemoServe(t, script)
	base := "http://" + p.addr
	c := client{t: t, base: base + "/api/v1", token: token}
	pg := page{t: t, ctx: ctx, p: p}
	console := pg.watchConsole()

	pg.run("open sign-in", chromedp.Navigate(base+"/"))
	pg.signIn(token)
	composer := `textarea[aria-label="Message"]`
	first := "Customers keep asking for password reset. What should we plan?"
	pg.newSession(base, "Human side")
	pg.run("send", chromedp.SendKeys(chromedp.CSS(composer), first+kb.Enter))
	pg.until("the human's message shows in its turn", fmt.Sprintf(`%s === %q`, userTexts, `["`+first+`"]`))
	// The closing answer holds after its first characters: the turn runs.
	pg.until("the turn runs and streams", `!!document.querySelector('.turn[data-state=running]') && (document.querySelector('.msg.live')?.dataset.source ?? '').length >= 12`)

	// Three quick sends, typed one after another: stored and shown in order,
	// each in a block of its own after the running turn's.
	pg.run("three quick sends", chromedp.SendKeys(chromedp.CSS(composer), "Alpha"+kb.Enter),
		chromedp.SendKeys(chromedp.CSS(composer), "Bravo"+kb.Enter), chromedp.SendKeys(chromedp.CSS(composer), "Charlie"+kb.Enter))
	order, _ := json.Marshal([]string{first, "Alpha", "Bravo", "Charlie"})
	pg.until("four turn blocks in the order typed, all sent", fmt.Sprintf(`%s === %q && !document.querySelector('.turn-block.pending')`, userTexts, order))
	pg.until("the running turn's block holds its own message and answer only", fmt.Sprintf(
		`(() => { const b = %s; return b.querySelectorAll('.msg.user').length === 1 && !!b.querySelector('.msg.live'); })()`,
		fmt.Sprintf(blockOf, first)))
	session := strings.TrimPrefix(eval[string](pg, `location.pathname`), "/projects/DEMO/sessions/")
	var stored struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	if s := c.do("GET", "/planner/sessions/"+session, nil, &stored); s != 200 {
		t.Fatalf("read the session %q: %d", session, s)
	}
	var humans []string
	for _, m := range stored.Messages {
		if m.Role == "user" && len(m.Content) > 0 && m.Content[0].Type == "text" {
			humans = append(humans, m.Content[0].Text)
		}
	}
	if got, _ := json.Marshal(humans); string(got) != string(order) {
		t.Fatalf("stored human messages %s, want %s", got, order)
	}

	// Bravo, queued, is cancelled: its marker shows in its own block.
	eval[any](pg, `[...document.querySelectorAll('.turn[data-state=queued]')].find(e => e.querySelector('.sent').innerText === 'Bravo').querySelector('.cancel').click()`)
	pg.until("Bravo's block says it was cancelled", fmt.Sprintf(`(%s?.querySelector('.marker.done')?.innerText ?? '') === 'Turn ended: cancelled'`, fmt.Sprintf(blockOf, "Bravo")))
	pg.until("the running turn's block has no end marker", fmt.Sprintf(`!%s.querySelector('.marker.done')`, fmt.Sprintf(blockOf, first)))
	pg.shot("session-turns")

	// The socket drops: a message sent meanwhile waits, without an error,
	// and goes, in order, once the socket is back.
	eval[any](pg, `window.__balletDropSocket(true)`)
	pg.until("the banner", `!!document.querySelector('[data-testid=conn-banner]')`)
	pg.run("send while disconnected", chromedp.SendKeys(chromedp.CSS(composer), "Delta"+kb.Enter))
	pg.until("Delta waits for the connection", `(document.querySelector('.turn-block.pending')?.innerText ?? '').includes('Waiting for the connection')`)
	if alert := eval[string](pg, `document.querySelector('section.session [role=alert]')?.innerText ?? ''`); alert != "" {
		t.Fatalf("a send while disconnected shows an error: %q", alert)
	}
	eval[any](pg, `window.__balletResumeSocket()`)
	order, _ = json.Marshal([]string{first, "Alpha", "Bravo", "Charlie", "Delta"})
	pg.until("Delta is sent once the socket is back", fmt.Sprintf(`%s === %q && !document.querySelector('.turn-block.pending') && !document.querySelector('section.session [role=alert]')`, userTexts, order))

	// Stop ends the running turn: its block says so, and the next one runs.
	eval[any](pg, `document.querySelector('.turn[data-state=running] .stop').click()`)
	pg.until("the stopped turn's block says it was cancelled", fmt.Sprintf(`(%s?.querySelector('.marker.done')?.innerText ?? '') === 'Turn ended: cancelled'`, fmt.Sprintf(blockOf, first)))
	pg.until("Alpha runs next", fmt.Sprintf(`%s?.dataset.state === 'running'`, fmt.Sprintf(blockOf, "Alpha")))

	// A tool call whose turn ends before its result is not left running.
	eval[any](pg, fmt.Sprintf(`window.__balletOutput({session: %q, turn: 'injected', type: 'queued', content: [{type: 'text', text: 'Echo'}]})`, session))
	eval[any](pg, fmt.Sprintf(`window.__balletOutput({session: %q, turn: 'injected', type: 'tool_call', tool: 'list_items', tool_use_id: 'tu-1', input: {}})`, session))
	pg.until("the tool call runs", `!!document.querySelector('li.tool[data-status=running]')`)
	eval[any](pg, fmt.Sprintf(`window.__balletOutput({session: %q, turn: 'injected', type: 'done', text: 'cancelled'})`, session))
	pg.until("the tool call shows cancelled, not running", `!document.querySelector('li.tool[data-status=running]') && !!document.querySelector('li.tool[data-status=cancelled]')`)

	// The held answer ends; after a reload the same turns show, in order.
	must(t, os.WriteFile(release, nil, 0o600))
	pg.until("every turn ends", `!document.querySelector('.turn')`)
	pg.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(composer)))

	pg.until("the human's messages after a reload", fmt.Sprintf(`%s === %q`, userTexts, order))
	pg.until("Bravo's cancellation after a reload", fmt.Sprintf(`(%s?.querySelector('.marker.done')?.innerText ?? '') === 'Turn ended: cancelled'`, fmt.Sprintf(blockOf, "Bravo")))
	pg.shot("session-human")

	// The changeset the first turn proposed is rejected with a reason: the
	// card says so, and the changeset is rejected.
	card := `.transcript article.changeset[data-status=proposed]`
	pg.until("the proposed changeset in the session", fmt.Sprintf(`!!document.querySelector(%q)`, card))
	id := eval[string](pg, fmt.Sprintf(`document.querySelector(%q).dataset.changeset`, card))
	eval[any](pg, fmt.Sprintf(`document.querySelector('%s button.reject').click()`, card))
	pg.run("write a reason", chromedp.SendKeys(chromedp.CSS(`textarea[aria-label="Reason for rejecting (optional)"]`), "Not this quarter"))
	eval[any](pg, `document.querySelector('article.changeset footer.rejecting button.reject.confirm').click()`)
	pg.until("the rejection confirmed with its reason", fmt.Sprintf(
		`(document.querySelector('article.changeset[data-changeset=%q][data-status=rejected] .decided')?.innerText ?? '') === 'Rejected — reason: Not this quarter. Nothing in the plan changed.'`, id))
	var cs struct {
		Status string `json:"status"`
	}
	if s := c.do("GET", "/changesets/"+id, nil, &cs); s != 200 || cs.Status != "rejected" {
		t.Fatalf("changeset %s after the rejection: %d %+v", id, s, cs)
	}
	console.none(pg, "over the whole flow")
}
