package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/balletplanner/ballet/store/storetest"
)

// consoleErrors collects what a tab writes to its console at level error:
// console.error calls (Runtime.consoleAPICalled), uncaught exceptions, and
// the browser log's errors (Log.entryAdded), among them every request the
// server answered 4xx or 5xx and every failed socket.
type consoleErrors struct {
	mu      sync.Mutex
	errs    []string
	marks   map[string]bool
	n       int // the markers written
	changed chan struct{}
}

// watchConsole starts collecting the tab's console errors, from now on.
func (pg page) watchConsole() *consoleErrors {
	pg.t.Helper()
	c := &consoleErrors{marks: map[string]bool{}, changed: make(chan struct{}, 1)}
	msgs := chromedp.Console(pg.ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			switch {
			case m.Type == chromedp.ConsoleDebug && strings.HasPrefix(m.Text, "ballet-mark-"):
				c.marks[m.Text] = true
			case m.Type == chromedp.ConsoleError || m.IsException():
				where := m.URL
				if m.Source != "" {
					where = m.Source + " " + where
				}
				c.errs = append(c.errs, fmt.Sprintf("%s (%s)", m.Text, strings.TrimSpace(where)))
			}
			c.mu.Unlock()
			select {
			case c.changed <- struct{}{}:
			default:
			}
		}
	}()
	return c
}

// take waits until every message the tab wrote before the call has been
// read (a marker written now comes back after them), then returns and
// forgets the errors collected so far.
func (c *consoleErrors) take(pg page) []string {
	pg.t.Helper()
	c.mu.Lock()
	c.n++
	mark := fmt.Sprintf("ballet-mark-%d", c.n)
	c.mu.Unlock()
	eval[any](pg, fmt.Sprintf(`console.debug(%q)`, mark))
	deadline := time.After(storetest.WaitTimeout)
	for {
		c.mu.Lock()
		if c.marks[mark] {
			errs := c.errs
			c.errs = nil
			c.mu.Unlock()
			return errs
		}
		c.mu.Unlock()
		select {
		case <-c.changed:
		case <-deadline:
			pg.fail("the console's messages", fmt.Errorf("the marker %s never came back", mark))
		}
	}
}

// none fails the test when the tab logged an error since the last check.
func (c *consoleErrors) none(pg page, when string) {
	pg.t.Helper()
	if errs := c.take(pg); len(errs) > 0 {
		pg.fail("console errors "+when, fmt.Errorf("%d logged:\n%s", len(errs), strings.Join(errs, "\n")))
	}
}

// phone makes the tab a 360×740 phone: mobile layout, touch, twice the
// pixels.
func (pg page) phone() {
	pg.t.Helper()
	pg.run("emulate a phone", chromedp.EmulateViewport(360, 740, chromedp.EmulateScale(2), chromedp.EmulatePortrait,
		chromedp.EmulateMobile, chromedp.EmulateTouch))
}

// overflowCheck lists what makes the page wider than the window: nothing
// when it fits. A phone's browser shows a page wider than the screen
// zoomed out, with a window as wide as the page: the window must be the
// screen's width too.
const overflowCheck = `(() => {
  const w = screen.width, d = document.documentElement;
  if (d.scrollWidth <= window.innerWidth && window.innerWidth <= w) return [];
  const out = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.right > w + 0.5 && out.length < 8) out.push(e.tagName.toLowerCase() + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().replace(/\s+/g, '.') : '') + ' right=' + Math.round(r.right));
  }
  return ['scrollWidth ' + d.scrollWidth + ', innerWidth ' + window.innerWidth + ', screen ' + w, ...out];
})()`

// reachCheck lists the header's links and buttons that a person cannot
// see and tap: outside the window, empty, or covered by something else.
const reachCheck = `(() => {
  const w = Math.min(window.innerWidth, screen.width), h = window.innerHeight, bad = [], names = [];
  for (const e of document.querySelectorAll('header.top a, header.top button')) {
    const r = e.getBoundingClientRect(), name = e.innerText.trim();
    names.push(name);
    const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (r.width === 0 || r.height === 0 || r.left < 0 || r.top < 0 || r.right > w || r.bottom > h || !top || !(e === top || e.contains(top)))
      bad.push(name + ' at ' + [r.left, r.top, r.right, r.bottom].map(Math.round).join(','));
  }
  return {names, bad};
})()`

// fits checks that the page is no wider than the window and that the
// header's links and buttons are the ones named by header, in order, each
// one seen and tappable.
func (pg page) fits(what string, header ...string) {
	pg.t.Helper()
	if over := eval[[]string](pg, overflowCheck); len(over) > 0 {
		pg.fail(what+" scrolls sideways", fmt.Errorf("%s", strings.Join(over, "\n")))
	}
	if len(header) == 0 {
		return // the sign-in page has no header
	}
	reach := eval[struct {
		Names []string `json:"names"`
		Bad   []string `json:"bad"`
	}](pg, reachCheck)
	got, _ := json.Marshal(reach.Names)
	if exp, _ := json.Marshal(header); string(got) != string(exp) {
		pg.fail(what+": the header", fmt.Errorf("links %s, want %s", got, exp))
	}
	if len(reach.Bad) > 0 {
		pg.fail(what+": the header's links out of reach", fmt.Errorf("%s", strings.Join(reach.Bad, "\n")))
	}
}

// onlyExpected checks that the errors logged are exactly the ones the test
// provoked (each matched by one of want, in order).
func onlyExpected(t *testing.T, errs []string, want ...string) {
	t.Helper()
	ok := len(errs) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(errs[i], want[i])
	}
	if !ok {
		t.Fatalf("console errors %q, want only ones containing %q", errs, want)
	}
}
