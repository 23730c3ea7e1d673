package tasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/tasks"
)

// publishText publishes a delta and checks what the script answered.
func (e *hubEnv) publishText(t *testing.T, tr turn, attempt, offset int64, text string, want int64) {
	t.Helper()
	n, err := e.pub.PublishText(context.Background(), tasks.TextDelta{Session: tr.session, Turn: tr.fence.Turn,
		Attempt: attempt, Offset: offset, Text: text})
	must(t, err)
	if n != want {
		t.Fatalf("PublishText(attempt %d, offset %d, %q) = %d, want %d", attempt, offset, text, n, want)
	}
}

// collectUntil reads a watch's outputs until one of type until arrives.
func collectUntil(t *testing.T, w *tasks.Watch, until string) []store.Output {
	t.Helper()
	var got []store.Output
	timeout := time.NewTimer(storetest.WaitTimeout)
	defer timeout.Stop()
	for {
		select {
		case o, ok := <-w.Outputs():
			if !ok {
				t.Fatalf("watch ended (%v) after %q", w.Err(), render(got))
			}
			got = append(got, o)
			if o.Type == until {
				return got
			}
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s after %q", until, render(got))
		}
	}
}

// stitched is the round text a client shows after outs.
func stitched(outs []store.Output) string {
	var l store.LiveText
	for _, o := range outs {
		l.Add(o)
	}
	return l.Text()
}

func TestTextOfAWorkerThatLostItsLeaseIsDropped(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	w := e.watch(t, e.hub, tr.session, 0)
	expect(t, w, "1:queued 2:started")
	stale, fresh := tasks.LiveAttempt(tr.fence.Token, 0), tasks.LiveAttempt(tr.fence.Token+1, 0)
	e.publishText(t, tr, stale, 0, "Writing a note.", 15)
	// Another worker claims the turn: its claim fences the round.
	must(t, e.pub.FenceRound(context.Background(), tr.session, tr.fence.Turn, fresh))
	e.publishText(t, tr, stale, 15, " Still writing.", tasks.TextDropped)
	e.publishText(t, tr, fresh, 0, "Recorded the note.", 18)
	e.publishText(t, tr, stale, 0, "Writing a note. Still writing.", tasks.TextDropped)
	outs, _, err := e.db.FinishTurn(context.Background(), tr.fence, store.TurnOutcome{Status: store.TurnDone, Reason: "end_turn"}, nil)
	must(t, err)
	e.pub.PublishFenced(context.Background(), fresh, outs...)
	got := collectUntil(t, w, store.OutputDone)
	if s := stitched(got[:len(got)-1]); s != "Recorded the note." {
		t.Fatalf("the client shows %q before done, want %q (outputs %q)", s, "Recorded the note.", render(got))
	}
	// The stale worker's text after the done is dropped at the script, so
	// a watcher sees nothing of it.
	e.publishText(t, tr, stale, 15, " Late.", tasks.TextDropped)
	e.publishText(t, tr, fresh, 18, " Late.", tasks.TextDropped)
	e.settleQuiet(t, w)
}

func TestARepeatedDeltaIsNotAppendedTwice(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	w := e.watch(t, e.hub, tr.session, 0)
	expect(t, w, "1:queued 2:started")
	a := tasks.LiveAttempt(tr.fence.Token, 0)
	e.publishText(t, tr, a, 0, "Writing", 7)
	// The publish of " a note." timed out but ran; the worker sends the
	// text from the last length it was told, so the two overlap.
	e.publishText(t, tr, a, 7, " a note.", 15)
	e.publishText(t, tr, a, 7, " a note. Done.", 21)
	e.publishText(t, tr, a, 15, " Done.", 21)      // all of it held already
	e.publishText(t, tr, a, 30, "after a gap", 21) // not placed: the caller sends from 21
	expect(t, w, "text(Writing a note. Done.)")
	part, err := e.rdb.Get(context.Background(), e.names.PartialTextKey(tr.session)).Result()
	must(t, err)
	if part != "Writing a note. Done." {
		t.Fatalf("the running text in Redis is %q", part)
	}
}

func TestAResumeSnapshotIsPlacedNotAppended(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	first := e.watch(t, e.hub, tr.session, 0)
	expect(t, first, "1:queued 2:started")
	a := tasks.LiveAttempt(tr.fence.Token, 0)
	e.publishText(t, tr, a, 0, "Hello", 5)
	shown := collectUntil(t, first, store.OutputText)
	// The client reconnects from the last cursor it had: it gets the
	// round's text so far as a snapshot with its offsets.
	again := e.watch(t, e.hub, tr.session, 2)
	snap := collectUntil(t, again, store.OutputText)
	e.publishText(t, tr, a, 5, " world", 11)
	if o := snap[0]; o.TextAfter != 2 || o.TextEnd != 5 || o.Attempt != a || o.Text != "Hello" {
		t.Fatalf("snapshot = %+v, want text %q after 2 ending at 5, attempt %d", o, "Hello", a)
	}
	rest := collectUntil(t, again, store.OutputText)
	if s := stitched(append(append(shown, snap...), rest...)); s != "Hello world" {
		t.Fatalf("the client shows %q, want %q", s, "Hello world")
	}
}

func TestAModelCallMadeAgainStartsTheTextOver(t *testing.T) {
	t.Parallel()
	e := newHubEnv(t)
	tr := e.startTurn(t)
	w := e.watch(t, e.hub, tr.session, 0)
	expect(t, w, "1:queued 2:started")
	e.publishText(t, tr, tasks.LiveAttempt(tr.fence.Token, 0), 0, "Hel", 3)
	got := collectUntil(t, w, store.OutputText)
	e.publishText(t, tr, tasks.LiveAttempt(tr.fence.Token, 1), 0, "Hi there", 8)
	e.publishText(t, tr, tasks.LiveAttempt(tr.fence.Token, 0), 3, "lo", tasks.TextDropped)
	got = append(got, collectUntil(t, w, store.OutputText)...)
	if s := stitched(got); s != "Hi there" {
		t.Fatalf("the client shows %q, want %q (outputs %+v)", s, "Hi there", got)
	}
	// A watcher joining now gets the new attempt's text only.
	late := e.watch(t, e.hub, tr.session, 2)
	if s := stitched(collectUntil(t, late, store.OutputText)); s != "Hi there" {
		t.Fatalf("a late watcher shows %q", s)
	}
}
