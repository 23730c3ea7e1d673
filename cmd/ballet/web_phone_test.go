package main

import (
	"os"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The web app on a 360×740 phone: every page, from the sign-in to the
// knowledge base, fits the screen's width with nothing to scroll sideways,
// the header keeps every link and Sign out in view and tappable, and no
// page logs an error to the console.
func TestWebAppOnAPhone(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	script, _, release := browserScript(t)
	p, token, _ := startDemoServe(t, script)
	base := "http://" + p.addr
	pg := page{t: t, ctx: ctx, p: p}
	console := pg.watchConsole()
	pg.phone()
	plain := []string{"Ballet Planner", "Sign out"}
	project := []string{"Ballet Planner", "Sessions", "Changesets", "Board", "Usage", "Sign out"}

	pg.run("open sign-in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	pg.fits("the sign-in page")
	console.none(pg, "on the sign-in page")
	pg.shot("phone-sign-in")
	pg.signIn(token)
	pg.fits("the projects page", plain...)
	console.none(pg, "on the projects page")
	pg.shot("phone-projects")

	// A session: a running turn streams while a second one waits in the
	// dock; then tool calls, the answer and the proposed changeset.
	composer := `textarea[aria-label="Message"]`
	pg.run("the sessions page", chromedp.Navigate(base+"/projects/DEMO"), chromedp.WaitVisible(chromedp.CSS(`input[aria-label="Session title"]`)))
	pg.fits("the sessions page", project...)
	pg.run("a new session", chromedp.SendKeys(chromedp.CSS(`input[aria-label="Session title"]`), "Password reset on a phone"+kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(composer)),
		chromedp.SendKeys(chromedp.CSS(composer), "Customers keep asking for password reset. What should we plan?"+kb.Enter))
	pg.until("the turn runs and streams", `!!document.querySelector('.turn[data-state=running]') && (document.querySelector('.msg.live')?.dataset.source ?? '').length >= 12`)
	pg.run("queue a second message", chromedp.SendKeys(chromedp.CSS(composer), "And what about two-factor sign-in, for every customer of every plan?"+kb.Enter))
	pg.until("the second turn queued", `[...document.querySelectorAll('.turn[data-state=queued] .position')].some(e => e.innerText === 'Queued · position 1')`)
	pg.fits("a session with a running and a queued turn", project...)
	eval[any](pg, `document.querySelector('.turn[data-state=queued] .cancel').click()`)
	pg.until("the queued turn cancelled", `!document.querySelector('.turn[data-state=queued]')`)
	must(t, os.WriteFile(release, nil, 0o600))
	pg.until("the turn ends", `!document.querySelector('.turn') && !document.querySelector('.msg.live')`)
	pg.until("the changeset in the session", `!!document.querySelector('.transcript article.changeset[data-status=proposed] .op')`)
	pg.until("four tool calls", `document.querySelectorAll('li.tool[data-status=ok]').length >= 4`)
	// A tool call opened shows its input and result.
	eval[any](pg, `document.querySelector('li.tool[data-tool=propose_changeset] summary').click()`)
	pg.until("the tool call open", `document.querySelector('li.tool[data-tool=propose_changeset] details').open`)
	pg.fits("a session with a tool call open and a changeset", project...)
	console.none(pg, "in a session")
	eval[any](pg, `document.querySelector('li.tool[data-tool=propose_changeset] summary').click()`)
	pg.until("the tool call folded", `!document.querySelector('li.tool[data-tool=propose_changeset] details').open`)
	pg.shot("phone-session")

	pg.run("changesets", chromedp.Navigate(base+"/projects/DEMO/changesets"), chromedp.WaitVisible(chromedp.CSS(`article.changeset .op`)))
	pg.until("the diffs", `document.querySelector('article.changeset').innerText.includes('Add a password reset endpoint')`)
	pg.fits("the changesets page", project...)
	console.none(pg, "on the changesets page")
	pg.shot("phone-changeset")

	pg.run("board", chromedp.Navigate(base+"/projects/DEMO/board"), chromedp.WaitVisible(chromedp.CSS(".ticket")))
	pg.until("the board's columns", `document.querySelectorAll('.column').length >= 4`)
	pg.fits("the board", project...)
	pg.shot("phone-board")
	eval[any](pg, `document.querySelector('.ticket').click()`)
	pg.until("the item opens", `(() => { const p = document.querySelector('.item-panel'); return !!p && !!p.querySelector('.meta'); })()`)
	pg.fits("the board with an item open", project...)
	console.none(pg, "on the board")
	pg.shot("phone-board-item")

	pg.run("usage", chromedp.Navigate(base+"/projects/DEMO/usage"), chromedp.WaitVisible(chromedp.CSS("svg.chart rect")))
	pg.fits("the usage page", project...)
	console.none(pg, "on the usage page")
	pg.shot("phone-usage")

	pg.run("knowledge", chromedp.Navigate(base+"/orgs/demo/knowledge"), chromedp.WaitVisible(chromedp.CSS("article.knowledge")))
	pg.fits("the knowledge page", plain...)
	console.none(pg, "on the knowledge page")
	pg.shot("phone-knowledge")
}
