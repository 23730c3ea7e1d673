package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/balletplanner/ballet/store"
)

// A turn committed whose enqueue never happened (the process died in
// between) is picked up by the sweeper, not lost.
func TestSweeperEnqueuesATurnThatWasNeverEnqueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	s := e.session()
	res, err := e.db.SendMessage(context.Background(), e.human, s, "hello", "", store.QueueLimits{})
	must(t, err)
	if there, _ := e.queue.Exists(res.Turn); there {
		t.Fatal("the turn is in the queue already")
	}
	e.start()
	if outs := e.waitDone(s, res.Turn); outs[len(outs)-1].Text != "end_turn" {
		t.Fatalf("outputs %v", types(outs))
	}
}

func TestSendIsIdempotentWithAClientTurnID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	s := e.session()
	id := uuid.NewString()
	ctx := context.Background()
	first, err := e.planner.Send(ctx, e.human, s, "hello", id)
	must(t, err)
	again, err := e.planner.Send(ctx, e.human, s, "hello", id)
	must(t, err)
	if first.Turn != id || again.Turn != id || again.Seq != first.Seq || again.Position != first.Position {
		t.Fatalf("first %+v, retry %+v", first, again)
	}
	var msgs, turns int
	must(t, e.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM planner_messages), (SELECT count(*) FROM planner_turns)`).Scan(&msgs, &turns))
	if msgs != 1 || turns != 1 {
		t.Fatalf("%d messages and %d turns after a retried send", msgs, turns)
	}
	// The same id in another session is that session's own turn.
	other := e.session()
	elsewhere, err := e.planner.Send(ctx, e.human, other, "hello", id)
	must(t, err)
	if elsewhere.Existing || elsewhere.Turn == first.Turn {
		t.Fatalf("the same client id in another session: %+v, first %+v", elsewhere, first)
	}
}

func TestSendRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "loop: true\nanswers:\n  - content:\n      - text: ok\n")
	s := e.session()
	ctx := context.Background()
	limits := store.QueueLimits{Total: 100, PerProject: 2}
	for range 2 {
		_, err := e.db.SendMessage(ctx, e.human, s, "queued", "", limits)
		must(t, err)
	}
	count := func() (n int) {
		must(t, e.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM planner_messages) + (SELECT count(*) FROM planner_turns)
			+ (SELECT count(*) FROM planner_outputs) + (SELECT count(*) FROM events WHERE type = 'planner.message')`).Scan(&n))
		return n
	}
	before := count()
	tests := []struct {
		name   string
		text   string
		turn   string
		limits store.QueueLimits
		code   store.Code
		msg    string
	}{
		{"project queue full", "one more", "", limits, store.CodeExhausted, "already has 2 queued planner turns"},
		{"queue full", "one more", "", store.QueueLimits{Total: 2, PerProject: 100}, store.CodeExhausted, "planner queue is full"},
		{"blank", "  \n ", "", store.QueueLimits{}, store.CodeInvalid, "text: must not be blank"},
		{"too long", strings.Repeat("é", store.MaxMessageRunes+1), "", store.QueueLimits{}, store.CodeInvalid, "at most 100000 characters"},
		{"turn id too long", "hi", strings.Repeat("k", 256), store.QueueLimits{}, store.CodeInvalid, "turn: must be 1-255 printable ASCII characters, got 256 bytes"},
		{"turn id with a newline", "hi", "turn-1\n", store.QueueLimits{}, store.CodeInvalid, "got byte 0x0a at offset 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.db.SendMessage(ctx, e.human, s, tt.text, tt.turn, tt.limits)
			if !store.IsCode(err, tt.code) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want %s containing %q", err, tt.code, tt.msg)
			}
		})
	}
	if after := count(); after != before {
		t.Fatalf("refused sends wrote %d rows", after-before)
	}
	// A service actor (the planner itself) may not send.
	planner := store.Caller{Principal: e.human.Principal, Actor: store.PlannerActor(s, "ann@example.com")}
	if _, err := e.db.SendMessage(ctx, planner, s, "hi", "", store.QueueLimits{}); !store.IsCode(err, store.CodeForbidden) {
		t.Fatalf("planner send: %v", err)
	}
}
