package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// TestSendMultitaskREST: reject is 409 while a turn is open, interrupt
// cancels the open turns and puts the new one at the head, and a client
// key that is not a UUID is an idempotency key.
func TestSendMultitaskREST(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	path := "/api/v1/planner/sessions/" + e.session + "/messages"
	first := e.do("POST", path, "engineer", map[string]any{"text": "first", "turn": "probe-1796612345-0"}).expect(t, 202)
	turn, _ := first.Body["turn"].(string)
	if len(turn) != 36 {
		t.Fatalf("turn %q is not a server UUID", turn)
	}
	again := e.do("POST", path, "engineer", map[string]any{"text": "first", "turn": "probe-1796612345-0",
		"multitask": "reject"}).expect(t, 202)
	if again.Body["turn"] != turn || num(again.Body["seq"]) != num(first.Body["seq"]) {
		t.Fatalf("retry %v, want %v", again.Body, first.Body)
	}
	second := e.do("POST", path, "engineer", map[string]any{"text": "second"}).expect(t, 202)
	before := e.plannerRows(t)
	r := e.do("POST", path, "engineer", map[string]any{"text": "third", "multitask": "reject"}).expect(t, 409)
	if r.errorCode() != "conflict" || !strings.Contains(r.message(), turn) {
		t.Fatalf("reject: %s %q", r.errorCode(), r.message())
	}
	if after := e.plannerRows(t); after != before {
		t.Fatalf("a rejected send wrote %d rows", after-before)
	}
	// An interrupt by someone who may not send cancels nothing.
	for who, status := range map[string]int{"viewer": 403, "outsider": 404} {
		e.do("POST", path, who, map[string]any{"text": "stop", "multitask": "interrupt"}).expect(t, status)
	}
	if after := e.plannerRows(t); after != before {
		t.Fatalf("refused interrupts wrote %d rows", after-before)
	}
	interrupt := map[string]any{"text": "now this", "multitask": "interrupt", "turn": "interrupt-1"}
	next := e.do("POST", path, "engineer", interrupt).expect(t, 202)
	if num(next.Body["position"]) != 0 {
		t.Fatalf("interrupting send %v, want position 0", next.Body)
	}
	// Its retry answers the same turn and cancels nothing, itself included.
	if again := e.do("POST", path, "engineer", interrupt).expect(t, 202); again.Body["turn"] != next.Body["turn"] {
		t.Fatalf("retried interrupt %v, want %v", again.Body, next.Body)
	}
	outs := e.do("GET", "/api/v1/planner/sessions/"+e.session+"/outputs", "engineer", nil).expect(t, 200)
	done := map[string]string{}
	var order []string
	for _, o := range outs.Body["items"].([]any) {
		m := o.(map[string]any)
		order = append(order, m["type"].(string))
		if m["type"] == store.OutputDone {
			done[m["turn"].(string)], _ = m["text"].(string)
		}
	}
	want := map[string]string{turn: store.ReasonCancelled, second.Body["turn"].(string): store.ReasonCancelled}
	if len(done) != 2 || done[turn] != want[turn] || done[second.Body["turn"].(string)] != store.ReasonCancelled {
		t.Fatalf("done outputs %v, want %v", done, want)
	}
	if got := strings.Join(order, " "); got != "queued queued done done queued" {
		t.Fatalf("outputs %s", got)
	}
	var open int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM planner_turns
		WHERE session_id = $1 AND finished_at IS NULL`, e.session).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 1 {
		t.Fatalf("%d open turns, want the new one only", open)
	}
}

// TestSendMultitaskRPC: planner.send with reject answers -32009 while a
// turn is open; a key that is not a UUID is accepted.
func TestSendMultitaskRPC(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	for i, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			c := e.mustRaw(t, proto)
			authAs(t, e, c, "engineer")
			sess := e.do("POST", "/api/v1/projects/WEB/planner/sessions", "engineer", map[string]any{"title": proto}).expect(t, 201).Body["id"]
			key := "probe-17966-" + string(rune('0'+i))
			res := c.call(t, 2, "planner.send", map[string]any{"session": sess, "text": "hi", "turn": key, "multitask": "reject"})
			if code, msg := rpcErr(res); code != 0 {
				t.Fatalf("send: %d %s", code, msg)
			}
			expectErr(t, c.call(t, 3, "planner.send", map[string]any{"session": sess, "text": "again", "multitask": "reject"}),
				api.RPCConflict, `multitask "reject"`)
		})
	}
}

// The Go client's SendMultitask: reject is refused with -32009 while the
// first turn waits, interrupt cancels it and takes the head.
func TestRPCClientSendMultitask(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	c := e.dial(t, api.SubprotocolJSON, "engineer")
	ctx := context.Background()
	first, err := c.SendMultitask(ctx, e.session, "first", "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SendMultitask(ctx, e.session, "second", "", "reject")
	var rerr *rpcclient.Error
	if !errors.As(err, &rerr) || rerr.Code != api.RPCConflict || !strings.Contains(rerr.Message, first.Turn) {
		t.Fatalf("reject: %v", err)
	}
	next, err := c.SendMultitask(ctx, e.session, "now this", "my-key-1", "interrupt")
	if err != nil || next.Position != 0 {
		t.Fatalf("interrupt: %+v %v", next, err)
	}
	var status, reason string
	if err := e.db.Pool().QueryRow(ctx, `SELECT status, done_reason FROM planner_turns WHERE id = $1`, first.Turn).Scan(&status, &reason); err != nil {
		t.Fatal(err)
	}
	if status != "cancelled" || reason != store.ReasonCancelled {
		t.Fatalf("the first turn is %s (%s)", status, reason)
	}
}
