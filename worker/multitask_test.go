package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// sendMultitask sends text to the session with a multitask strategy and a client
// turn id ("" for none).
func (e *env) sendMultitask(session, text, multitask, turn string) (store.SendResult, error) {
	return e.planner.Submit(context.Background(), e.human, store.SendRequest{Session: session, Text: text,
		Multitask: multitask, Turn: turn})
}

// onlyDone returns the turn's one done output, failing when it has none or
// more than one.
func onlyDone(t *testing.T, outs []store.Output) store.Output {
	t.Helper()
	var dones []store.Output
	for _, o := range outs {
		if o.Type == store.OutputDone {
			dones = append(dones, o)
		}
	}
	if len(dones) != 1 {
		t.Fatalf("%d done outputs: %v", len(dones), types(outs))
	}
	return dones[0]
}

// firstOf returns the cursor of the first output of type typ.
func firstOf(t *testing.T, outs []store.Output, typ string) int64 {
	t.Helper()
	for _, o := range outs {
		if o.Type == typ {
			return o.Cursor
		}
	}
	t.Fatalf("no %s output: %v", typ, types(outs))
	return 0
}

// turnCounts counts the session's turns, and those not finished.
func (e *env) turnCounts(session string) (all, open int) {
	e.t.Helper()
	must(e.t, e.db.Pool().QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE finished_at IS NULL)
		FROM planner_turns WHERE session_id = $1`, session).Scan(&all, &open))
	return all, open
}

func TestInterruptStopsTheRunningTurnAndRunsTheNewOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	e.start()
	s := e.session()
	running := e.send(s, "use the slow tool").Turn
	queued := e.send(s, "queued behind it").Turn
	select {
	case <-e.started:
	case <-time.After(time.Minute):
		t.Fatal("the slow tool never started")
	}
	next, err := e.sendMultitask(s, "fresh start", store.MultitaskInterrupt, "")
	must(t, err)
	if next.Position != 1 {
		t.Fatalf("the new turn's position %d, want 1 (behind the stopping turn)", next.Position)
	}
	assertCancelled(t, e, s, running)
	queuedOuts := assertCancelled(t, e, s, queued)
	outs := e.waitDone(s, next.Turn)
	if done := onlyDone(t, outs); done.Text != store.ReasonEndTurn {
		t.Fatalf("new turn ended %q: %v", done.Text, types(outs))
	}
	if !strings.Contains(fmt.Sprint(outs), "Fresh answer.") {
		t.Fatalf("new turn's outputs %+v lack its answer", outs)
	}
	// The queued turn ended within the send, before the new turn's queued output.
	if firstOf(t, queuedOuts, store.OutputDone) > firstOf(t, outs, store.OutputQueued) {
		t.Fatal("the cancelled queued turn's done comes after the new turn's queued output")
	}
	// The new turn started only once the running turn had ended.
	if firstOf(t, e.outputs(s, running), store.OutputDone) > firstOf(t, outs, store.OutputStarted) {
		t.Fatal("the new turn started before the interrupted turn ended")
	}
}

// An interrupt sent while the session's turn is queued, starting, running
// or ending: whatever the moment, the old turn ends once, done with a
// reason, and the new turn runs to its end once, after it.
func TestInterruptRacingTheTurnsEnd(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"fifo", "fair"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cancelScript)
			if mode == "fair" {
				e.fair(dispatch.Config{})
			}
			e.start()
			interruptRounds(t, e)
		})
	}
}

// interruptRounds sends a turn and at once, or once it started, an
// interrupting one, in fresh sessions, and checks how each ends.
func interruptRounds(t *testing.T, e *env) {
	for i := range 8 {
		s := e.session()
		old := e.send(s, "hello").Turn
		if i%2 == 1 {
			storetest.WaitFor(t, "the turn to start", func() bool {
				return strings.Contains(fmt.Sprint(types(e.outputs(s, old))), store.OutputStarted)
			})
		}
		next, err := e.sendMultitask(s, "fresh start", store.MultitaskInterrupt, "")
		must(t, err)
		oldOuts := e.waitDone(s, old)
		if done := onlyDone(t, oldOuts); done.Text != store.ReasonEndTurn && done.Text != store.ReasonCancelled {
			t.Fatalf("round %d: old turn ended %q", i, done.Text)
		}
		outs := e.waitDone(s, next.Turn)
		if done := onlyDone(t, outs); done.Text != store.ReasonEndTurn {
			t.Fatalf("round %d: new turn ended %q: %v", i, done.Text, types(outs))
		}
		if firstOf(t, oldOuts, store.OutputDone) > firstOf(t, outs, store.OutputStarted) {
			t.Fatalf("round %d: the new turn started before the old one ended", i)
		}
		if all, open := e.turnCounts(s); all != 2 || open != 0 {
			t.Fatalf("round %d: %d turns, %d open; want 2 and 0", i, all, open)
		}
		var answers int
		must(t, e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_messages
			WHERE session_id = $1 AND turn_id = $2 AND role = 'assistant'`, s, next.Turn).Scan(&answers))
		if answers != 1 {
			t.Fatalf("round %d: the new turn stored %d answers, want 1", i, answers)
		}
	}
}

// Two sends with multitask reject racing on an idle session: exactly one
// is the session's turn, the other is refused with a conflict.
func TestRejectRacingSends(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	for round := range 6 {
		s := e.session()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				<-start
				_, errs[i] = e.sendMultitask(s, fmt.Sprintf("racer %d", i), store.MultitaskReject, "")
			})
		}
		close(start)
		wg.Wait()
		won, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case store.IsCode(err, store.CodeConflict) && strings.Contains(err.Error(), `multitask "reject"`):
				refused++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 || refused != 1 {
			t.Fatalf("round %d: %d won and %d refused, want 1 and 1", round, won, refused)
		}
		if all, _ := e.turnCounts(s); all != 1 {
			t.Fatalf("round %d: %d turns, want 1", round, all)
		}
	}
}

// A reject send is refused only while a turn is open, and a retry with
// its own key answers its turn rather than a conflict; a refused send
// writes nothing.
func TestRejectWhileATurnIsOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	s := e.session()
	first, err := e.sendMultitask(s, "first", store.MultitaskReject, "key-1")
	must(t, err)
	again, err := e.sendMultitask(s, "first", store.MultitaskReject, "key-1")
	must(t, err)
	if again.Turn != first.Turn || again.Seq != first.Seq {
		t.Fatalf("retry %+v, want %+v", again, first)
	}
	rows := func() (n int) {
		must(t, e.db.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM planner_messages)
			+ (SELECT count(*) FROM planner_turns) + (SELECT count(*) FROM planner_outputs)
			+ (SELECT count(*) FROM events WHERE type = 'planner.message')`).Scan(&n))
		return n
	}
	before := rows()
	_, err = e.sendMultitask(s, "second", store.MultitaskReject, "key-2")
	if !store.IsCode(err, store.CodeConflict) || !strings.Contains(err.Error(), first.Turn) {
		t.Fatalf("send while %s is queued: %v, want a conflict naming it", first.Turn, err)
	}
	if after := rows(); after != before {
		t.Fatalf("a refused send wrote %d rows", after-before)
	}
	e.start()
	e.waitDone(s, first.Turn)
	second, err := e.sendMultitask(s, "second", store.MultitaskReject, "key-2")
	must(t, err)
	if outs := e.waitDone(s, second.Turn); onlyDone(t, outs).Text != store.ReasonEndTurn {
		t.Fatalf("second turn: %v", types(outs))
	}
}
