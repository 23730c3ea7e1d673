package api_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// chromium is Debian's, which `make test` installs when missing
// (deploy/dev/services.sh chromium).
const chromium = "/usr/bin/chromium"

// headless starts a headless chromium with a fresh profile.
func headless(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s is missing: `make test` installs it (deploy/dev/services.sh chromium)", chromium)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1280, 900))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// waitIn waits for a JavaScript expression of the page to be true.
func waitIn(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, storetest.WaitTimeout)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage: %s", what, err, html)
	}
}

// TestDashboardButtonsInABrowser: in the dashboard as a browser shows it,
// the pending turn's Archive button answers with the reason it is refused,
// shown on the page, and its Delete button cancels the turn and says so.
func TestDashboardButtonsInABrowser(t *testing.T) {
	t.Parallel()
	e, turns, ids := pausedEnv(t)
	ctx := headless(t)
	base := "http://" + e.srv.Addr()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/monitoring/queues/"+e.names.Queue()+"?status=pending&token="+e.tokens["platform"])); err != nil {
		t.Fatal(err)
	}
	prefix := strings.SplitN(ids[0], "-", 2)[0]
	row := fmt.Sprintf(`[...document.querySelectorAll('tbody tr')].find(r => r.innerText.includes(%q))`, prefix)
	// A row's buttons show once its action cell is entered; Delete, then Archive.
	press := func(button int) string {
		return fmt.Sprintf(`(() => { const r = %s; if (!r) return false;
			const cell = r.lastElementChild; let bs = cell.querySelectorAll('button');
			if (bs.length < 2) { bs[0].click(); return false; }
			bs[%d].click(); return true; })()`, row, button)
	}
	notice := `(document.getElementById('ballet-notice') || {}).innerText || ''`
	waitIn(t, ctx, "the turn's task listed", row+` !== undefined`)
	waitIn(t, ctx, "Archive pressed", press(1))
	want := "Archive on queue " + e.names.Queue() + " is refused: Postgres owns the turn"
	waitIn(t, ctx, "the refusal shown", fmt.Sprintf(`(%s).includes(%q)`, notice, want))
	if s := e.status(t, turns[0]); s != string(store.TurnQueued) || e.taskOfTurn(t, "pending", turns[0]) != ids[0] {
		t.Fatalf("after the refused Archive, the turn is %s", s)
	}
	waitIn(t, ctx, "Delete pressed", press(0))
	waitIn(t, ctx, "the cancel shown", fmt.Sprintf(`(%s).includes(%q)`, notice, "Turn "+turns[0]+` is cancelled: it ended with done "cancelled".`))
	waitIn(t, ctx, "the row gone", row+` === undefined`)
	if got := e.dones(t, 0, turns[0]); len(got) != 1 || got[0] != store.ReasonCancelled {
		t.Fatalf("done outputs %q", got)
	}
	if s := e.status(t, turns[1]); s != string(store.TurnQueued) {
		t.Fatalf("the other turn is %s", s)
	}
}
