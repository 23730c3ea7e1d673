package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// While a turn runs, the composer offers "Stop and send": the running turn
// ends cancelled and the new message runs next, in a block of its own (its
// closing answer is held until the test releases it).
func TestWebAppStopAndSend(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	script, _, release := browserScript(t)
	p, token, _ := startDemoServe(t, script)
	base := "http://" + p.addr
	pg := page{t: t, ctx: ctx, p: p}

	pg.run("open sign-in", chromedp.Navigate(base+"/"))
	pg.signIn(token)
	composer := `textarea[aria-label="Message"]`
	first := "Customers keep asking for password reset. What should we plan?"
	pg.newSession(base, "Stop and send")
	pg.run("send", chromedp.SendKeys(chromedp.CSS(composer), first+kb.Enter))
	pg.until("the turn runs", `!!document.querySelector('.turn[data-state=running]')`)
	if eval[bool](pg, `!!document.querySelector('form.composer button.interrupt')`) != true {
		t.Fatal("no Stop and send button while the turn runs")
	}
	pg.run("type the new message", chromedp.SendKeys(chromedp.CSS(composer), "Plan the login page instead"))
	eval[any](pg, `document.querySelector('form.composer button.interrupt').click()`)
	pg.until("the running turn ends cancelled", fmt.Sprintf(`(%s?.querySelector('.marker.done')?.innerText ?? '') === 'Turn ended: cancelled'`,
		fmt.Sprintf(blockOf, first)))
	order := `["` + first + `","Plan the login page instead"]`
	pg.until("the new message in a block of its own", fmt.Sprintf(`%s === %q`, userTexts, order))
	must(t, os.WriteFile(release, nil, 0o600))
	pg.until("the new turn runs to its end and the button goes", `!document.querySelector('.turn') && !document.querySelector('form.composer button.interrupt')`)
	if text := eval[string](pg, fmt.Sprintf(`%s.querySelector('.marker.done')?.innerText ?? ''`, fmt.Sprintf(blockOf, "Plan the login page instead"))); strings.Contains(text, "cancelled") {
		t.Fatalf("the new turn ended %q", text)
	}
}
