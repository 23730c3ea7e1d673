package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"go.yaml.in/yaml/v3"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store/storetest"
)

// chromiumPath is Debian's chromium, which `make test` installs when missing
// (deploy/dev/services.sh chromium).
const chromiumPath = "/usr/bin/chromium"

// injection is Markdown that tries HTML, script and link injection.
const injection = "Look: <img src=x onerror=\"window.__pwned=1\"> and [click me](javascript:window.__pwned=2) " +
	"and <script>window.__pwned=3</script> then **bold text**."

// browserScript is the demo conversation with a slow closing answer that
// holds after its first 16 characters until the file at release exists (so
// a second message can queue behind it and the socket can drop mid-stream
// however slow the machine), and an answer that attempts Markdown injection.
func browserScript(t *testing.T) (path, closing, release string) {
	t.Helper()
	s := *fakellm.Demo()
	s.Answers = append([]fakellm.Answer{{Match: "INJECT", Content: []fakellm.Block{{Text: injection}}}}, s.Answers...)
	for i, a := range s.Answers {
		if strings.Contains(a.Match, "propose_changeset") {
			a.ChunkSize, a.ChunkLatency = 4, 50*time.Millisecond
			a.HoldAfter, a.HoldUntil = 4, filepath.Join(t.TempDir(), "release")
			release = a.HoldUntil
			s.Answers[i] = a
			closing = a.Content[0].Text
		}
	}
	b, err := yaml.Marshal(s)
	must(t, err)
	path = filepath.Join(t.TempDir(), "script.yaml")
	must(t, os.WriteFile(path, b, 0o600))
	return path, closing, release
}

// browser starts a headless chromium with a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing: `make test` installs it (deploy/dev/services.sh chromium)", chromiumPath)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	must(t, chromedp.Do(ctx)) // starts the browser, without a deadline
	return ctx
}

// page drives one browser tab and fails the test on the first error.
type page struct {
	t   *testing.T
	ctx context.Context
	p   *process
}

// run runs steps, each within storetest.WaitTimeout.
func (pg page) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	pg.t.Helper()
	ctx, cancel := context.WithTimeout(pg.ctx, storetest.WaitTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		pg.fail(what, err)
	}
}

func (pg page) fail(what string, err error) {
	pg.t.Helper()
	ctx, cancel := context.WithTimeout(pg.ctx, 5*time.Second)
	defer cancel()
	html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
	pg.t.Fatalf("%s: %v\npage: %s\nserver log:\n%s", what, err, html, pg.p.log())
}

// until waits for a JavaScript expression to be true.
func (pg page) until(what, expr string) {
	pg.t.Helper()
	pg.run(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond),
		chromedp.WithPollingTimeout(storetest.WaitTimeout)))
}

// eval evaluates a JavaScript expression.
func eval[T any](pg page, expr string, opts ...chromedp.EvaluateOption) T {
	pg.t.Helper()
	ctx, cancel := context.WithTimeout(pg.ctx, storetest.WaitTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		pg.fail("evaluate "+expr, err)
	}
	return v
}

// shot saves a screenshot of the page into docs/screenshots when
// BALLET_SCREENSHOTS=1.
func (pg page) shot(name string) {
	pg.t.Helper()
	if os.Getenv("BALLET_SCREENSHOTS") != "1" {
		return
	}
	// A full-page capture draws sticky bars where the viewport was: they
	// go back in the flow for the capture.
	eval[any](pg, `(async () => { const s = document.createElement('style'); s.id = 'shot';
		s.textContent = '.top, .dock { position: static !important; }';
		document.head.append(s); void document.documentElement.offsetHeight;
		await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))); })()`, chromedp.EvalAwaitPromise)
	b, err := chromedp.Run(pg.ctx, chromedp.FullScreenshot(100))
	eval[any](pg, `document.getElementById('shot')?.remove()`)
	if err != nil {
		pg.fail("screenshot "+name, err)
	}
	must(pg.t, os.WriteFile(filepath.Join("..", "..", "docs", "screenshots", name+".png"), b, 0o644))
}

// newSession opens the demo project's sessions page, creates a session
// titled title and waits for its composer.
func (pg page) newSession(base, title string) {
	pg.t.Helper()
	pg.run("a new session: "+title, chromedp.Navigate(base+"/projects/DEMO"), chromedp.WaitVisible(chromedp.CSS(`input[aria-label="Session title"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="Session title"]`), title+kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`textarea[aria-label="Message"]`)))
}

// signIn pastes the token into the open sign-in page and waits for the
// demo project.
func (pg page) signIn(token string) {
	pg.t.Helper()
	pg.run("sign in", chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.SendKeys(chromedp.ID("token"), kb.Enter), chromedp.WaitVisible(chromedp.CSS(`a[href="/projects/DEMO"]`)))
}

// inert is the check that a rendered injection attempt is text only.
const inertCheck = `(() => { const r = document.querySelector(%q);
  return !!r && r.querySelectorAll('img[onerror], script, a[href^="javascript"], [onclick], iframe').length === 0 &&
    window.__pwned === undefined && r.innerText.includes('onerror') && r.querySelector('strong') !== null; })()`

// The web app end to end in a real browser against `ballet serve` with the
// scripted model: sign in, a session with streaming, tool calls, a queued
// turn cancelled, a dropped socket resumed, the proposed changeset applied
// in part, the board and usage, and Markdown injection rendered inert.
func TestWebAppInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	script, closing, release := browserScript(t)
	p, token, _ := startDemoServe(t, script)
	base := "http://" + p.addr
	c := client{t: t, base: base + "/api/v1", token: token}
	if s := c.do("POST", "/organizations/demo/knowledge/entries",
		map[string]any{"kind": "note", "title": "Injected note", "body": injection, "projects": []string{"DEMO"}}, nil); s != 201 {
		t.Fatalf("create knowledge entry: %d", s)
	}
	pg := page{t: t, ctx: ctx, p: p}
	console := pg.watchConsole()

	// Sign in by pasting the token; the projects page lists the demo project.
	pg.run("open sign-in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	console.none(pg, "on the sign-in page")
	pg.shot("sign-in")
	// A wrong token is refused with a message, not a silently cleared form.
	pg.run("sign in with a wrong token", chromedp.SendKeys(chromedp.ID("token"), "blt_wrong"), chromedp.SendKeys(chromedp.ID("token"), kb.Enter))
	pg.until("the wrong token refused with a message",
		`(document.querySelector('main.signin [role=alert]')?.textContent ?? '') === 'That token was not accepted.'`)
	// The browser logs the api's 401 to the wrong token, and nothing else.
	onlyExpected(t, console.take(pg), "status of 401")
	pg.signIn(token)
	pg.shot("projects")

	// The board before: no password reset tickets.
	pg.run("open board", chromedp.Navigate(base+"/projects/DEMO/board"), chromedp.WaitVisible(chromedp.CSS(".ticket")))
	pg.until("board without the new tickets", `![...document.querySelectorAll('.ticket')].some(e => e.innerText.includes('password reset endpoint'))`)

	// A new session, and a message the demo model answers.
	pg.newSession(base, "Password reset")
	composer := `textarea[aria-label="Message"]`
	pg.run("send", chromedp.SendKeys(chromedp.CSS(composer), "Customers keep asking for password reset. What should we plan?"+kb.Enter))
	pg.until("the turn runs", `!!document.querySelector('.turn[data-state=running] .stop')`)

	// A second message queues behind it, shows its position, and is cancelled.
	pg.run("queue a second message", chromedp.SendKeys(chromedp.CSS(composer), "And what about two-factor sign-in?"+kb.Enter))
	pg.until("the second turn queued at position 1", `[...document.querySelectorAll('.turn[data-state=queued] .position')].some(e => e.innerText === 'Queued · position 1')`)
	pg.shot("session-queued")
	running := eval[string](pg, `document.querySelector('.turn[data-state=running]').dataset.turn`)
	queued := eval[string](pg, `document.querySelector('.turn[data-state=queued]').dataset.turn`)
	// The button is clicked from the page, not at its coordinates: it moves
	// down while the answer streams in above it, so a click at the place it
	// was a moment ago can miss it on a loaded machine.
	eval[any](pg, `document.querySelector('.turn[data-state=queued] .cancel').click()`)
	pg.until("the queued turn is gone while the first still runs", fmt.Sprintf(
		`!document.querySelector('.turn[data-turn=%q]') && !!document.querySelector('.turn[data-state=running][data-turn=%q]')`, queued, running))

	// Tool calls fold under one line each, ok, and the answer streams in.
	pg.until("four tool calls folded", `[...document.querySelectorAll('li.tool[data-status=ok] summary')].map(e => e.querySelector('.name').innerText).join(',') === 'list_runnable,search_project,read_skill,propose_changeset'`)
	pg.until("the closing answer streams up to its hold", `(document.querySelector('.msg.live')?.dataset.source ?? '').length >= 12`)

	// The socket drops mid-turn: a banner, then a resume that loses nothing.
	eval[any](pg, `window.__balletDropSocket(true)`)
	pg.until("the banner", `!!document.querySelector('[data-testid=conn-banner]')`)
	pg.shot("session-reconnecting")
	before := eval[string](pg, `document.querySelector('.msg.live')?.dataset.source ?? ''`)
	// The answer goes on streaming while the socket is down.
	must(t, os.WriteFile(release, nil, 0o600))
	eval[any](pg, `window.__balletResumeSocket()`)
	pg.until("resumed", `!document.querySelector('[data-testid=conn-banner]') && document.querySelector('section.session').dataset.resumes === '1'`)
	want, _ := json.Marshal(closing)
	cont := fmt.Sprintf(`(() => { const w = %s; const l = document.querySelector('.msg.live'); const s = l ? l.dataset.source : null;
		  return s === null || (s.length > %d && w.startsWith(s)); })()`, want, len(before))
	pg.until("the streamed text after the resume continues without gap or repeat", cont)
	live := eval[string](pg, `document.querySelector('.msg.live')?.dataset.source ?? ''`)
	if !strings.HasPrefix(closing, live) {
		pg.fail("the streamed text after the resume", fmt.Errorf("%q is not a prefix of %q", live, closing))
	}
	pg.until("the turn ends", `!document.querySelector('.turn') && !document.querySelector('.msg.live')`)
	once := eval[int](pg, `document.querySelector('.transcript').innerText.split('Nothing changes until you apply it').length - 1`)
	if once != 1 {
		t.Fatalf("the closing answer appears %d times", once)
	}
	// The proposed changeset appears in the session without a reload.
	pg.until("the changeset in the session", `!!document.querySelector('.transcript article.changeset[data-status=proposed]')`)
	pg.shot("session")

	// Changesets: a $ref not chosen is explained; two operations applied.
	pg.run("changesets page", chromedp.Navigate(base+"/projects/DEMO/changesets"), chromedp.WaitVisible(chromedp.CSS(`article.changeset .op`)))
	pg.until("diffs of the new tickets", `document.querySelector('article.changeset').innerText.includes('Add a password reset endpoint')`)
	pg.run("leave operation 1 out", chromedp.Click(chromedp.CSS(`li.op[data-op="0"] input[type=checkbox]`)))
	pg.until("the conflict explained", `(document.querySelector('li.op[data-op="2"] .conflict')?.innerText ?? '').includes('created by operation 1')`)
	pg.run("choose 1 and 2, not 3", chromedp.Click(chromedp.CSS(`li.op[data-op="0"] input[type=checkbox]`)),
		chromedp.Click(chromedp.CSS(`li.op[data-op="2"] input[type=checkbox]`)))
	pg.until("two chosen", `document.querySelector('button.apply').innerText === 'Apply chosen (2 of 3)' && !document.querySelector('.conflict')`)
	pg.shot("changeset")
	pg.run("apply", chromedp.Click(chromedp.CSS(`button.apply`)))
	pg.until("applied", `!document.querySelector('article.changeset[data-status=proposed]')`)
	// The applied changeset stays in view and says what was done, with
	// the new items' keys.
	pg.until("the apply confirmed with the created items", `(() => { const d = document.querySelector('article.changeset[data-status=applied] .decided');
		return !!d && d.innerText.startsWith('Applied 2 of 3 operations:') && d.querySelectorAll('ul.made li a[href^="/projects/DEMO/board?item=DEMO-"]').length === 2 &&
		  [...d.querySelectorAll('ul.made li')].every(li => /^Created DEMO-\d+ “/.test(li.innerText)); })()`)
	pg.run("applied changesets", chromedp.Navigate(base+"/projects/DEMO/changesets?status=applied"))
	pg.until("two operations applied", `document.querySelectorAll('article.changeset[data-status=applied] .applied.yes').length === 2`)

	// The board shows the new tickets.
	pg.run("board after", chromedp.Navigate(base+"/projects/DEMO/board"), chromedp.WaitVisible(chromedp.CSS(".ticket")))
	pg.until("the new tickets on the board", `['Add a password reset endpoint', 'Build the reset password page'].every(t => [...document.querySelectorAll('.ticket')].some(e => e.innerText.includes(t)))`)
	pg.shot("board")
	// A card opens its item: title, state and acceptance criteria; Escape closes it.
	eval[any](pg, `[...document.querySelectorAll('.ticket')].find(e => e.innerText.includes('Add a password reset endpoint')).click()`)
	pg.until("the item opens from its card", `(() => { const p = document.querySelector('.item-panel');
		return !!p && location.search.startsWith('?item=DEMO-') && p.innerText.includes('Add a password reset endpoint') &&
		  p.querySelectorAll('ul.criteria li').length > 0; })()`)
	pg.shot("board-item")
	eval[any](pg, `document.querySelector('.item-panel').dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}))`)
	pg.until("Escape closes the item", `!document.querySelector('.item-panel') && location.search === ''`)

	pg.run("usage", chromedp.Navigate(base+"/projects/DEMO/usage"), chromedp.WaitVisible(chromedp.CSS("svg.chart rect")))
	// A legend says what the bars are; a session's row links to the session.
	pg.until("the usage legend and a session link", `(document.querySelector('.legend')?.innerText ?? '').includes('input tokens') &&
		[...document.querySelectorAll('svg.chart a.row-link')].some(a => /^\/projects\/DEMO\/sessions\/[0-9a-f-]{36}$/.test(a.getAttribute('href')))`)
	pg.shot("usage")

	// Markdown injection from the model and from a knowledge entry is inert.
	pg.newSession(base, "Injection")
	pg.run("send", chromedp.SendKeys(chromedp.CSS(composer), "INJECT something"+kb.Enter))
	pg.until("the injected answer", `[...document.querySelectorAll('.msg.assistant')].some(e => !e.dataset.source && e.innerText.includes('bold text'))`)
	pg.until("the model's injection is inert", fmt.Sprintf(inertCheck, ".transcript"))
	pg.run("knowledge", chromedp.Navigate(base+"/orgs/demo/knowledge"), chromedp.WaitVisible(chromedp.CSS("article.knowledge")))
	pg.until("the knowledge entry's injection is inert", fmt.Sprintf(inertCheck, "main"))
	// Search narrows the entries; an entry links back to its project.
	pg.run("search knowledge", chromedp.SendKeys(chromedp.CSS(`input[aria-label="Search knowledge"]`), "Injected"+kb.Enter))
	pg.until("the search puts the injected note first, linked to its project", `(() => { const a = [...document.querySelectorAll('article.knowledge')];
		return (document.querySelector('p.found')?.innerText ?? '').includes('found for “Injected”') && a.length >= 1 &&
		  a[0].querySelector('h2').innerText === 'Injected note' && !!a[0].querySelector('.meta a[href="/projects/DEMO"]'); })()`)
	pg.run("show all knowledge", chromedp.Click(chromedp.CSS(`form.search button[type=button]`)))
	pg.until("every entry again", `!document.querySelector('p.found')`)
	pg.shot("knowledge")
	console.none(pg, "over the whole flow")
}

// The committed bundle (api/web/dist) is what `npm ci && npm run build` makes
// of web's sources.
func TestWebBundleMatchesSources(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("npm is missing: `make test` installs it (deploy/dev/services.sh node)")
	}
	src := filepath.Join("..", "..", "api", "web")
	tmp := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "index.html", "vite.config.ts", "tsconfig.json", "src"} {
		cmd := exec.Command("cp", "-r", filepath.Join(src, f), tmp)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v %s", f, err, b)
		}
	}
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund"}, {"run", "build"}} {
		cmd := exec.Command("npm", args...)
		cmd.Dir = tmp
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	want := tree(t, filepath.Join(tmp, "dist"))
	got := tree(t, filepath.Join(src, "dist"))
	for name, b := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("api/web/dist lacks %s: run `make web`", name)
		} else if g != b {
			t.Errorf("api/web/dist/%s differs from a fresh build: run `make web`", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("api/web/dist/%s is not made by the build: run `make web`", name)
		}
	}
}

func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	}))
	return out
}
