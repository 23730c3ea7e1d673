package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/balletplanner/ballet/api"
	"github.com/balletplanner/ballet/store"
)

// nextEvent reads frames until a notification of method for the
// subscription and returns its params; every notification read on the way
// is passed to seen.
func (c *rawConn) nextEvent(t *testing.T, method, sub string, seen func(map[string]any)) map[string]any {
	t.Helper()
	for {
		m, closed := c.recv(t)
		if closed != 0 {
			t.Fatalf("closed %d while waiting for %s of %s", closed, method, sub)
		}
		p, _ := m["params"].(map[string]any)
		if _, ok := m["method"]; ok && seen != nil {
			seen(m)
		}
		if m["method"] == method && p["subscription"] == sub {
			return p
		}
	}
}

func subscribeOK(t *testing.T, c *rawConn, id int, params map[string]any) int64 {
	t.Helper()
	r := c.call(t, id, "stream.subscribe", params)
	if code, msg := rpcErr(r); code != 0 {
		t.Fatalf("subscribe %v: %d %s", params, code, msg)
	}
	res := r["result"].(map[string]any)
	if res["subscription"] != params["subscription"] {
		t.Fatalf("subscribe result %v", res)
	}
	return num(res["seq"])
}

func authAs(t *testing.T, e *rpcEnv, c *rawConn, who string) {
	t.Helper()
	if code, msg := rpcErr(c.call(t, 1, "auth", map[string]any{"token": e.tokens[who]})); code != 0 {
		t.Fatalf("auth as %s: %d %s", who, code, msg)
	}
}

func TestRPCStreamEvents(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			// One after the other: each reads the project's whole log.
			c := e.mustRaw(t, proto)
			authAs(t, e, c, "viewer")
			seq := subscribeOK(t, c, 2, map[string]any{"subscription": "web", "stream": "project:WEB"})
			item := e.do("POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": "streamed " + proto}).expect(t, 201).Body
			key := item["key"].(string)
			ev := c.nextEvent(t, "stream.event", "web", nil)
			if num(ev["seq"]) != seq+1 || ev["type"] != "item.created" || ev["entity_type"] != "item" ||
				ev["entity_id"] != item["id"] || ev["entity_key"] != key {
				t.Fatalf("event %v, want item.created of %s numbered %d", ev, key, seq+1)
			}
			if at, _ := ev["occurred_at"].(string); at == "" {
				t.Fatalf("occurred_at %v", ev["occurred_at"])
			} else if _, err := time.Parse(time.RFC3339Nano, at); err != nil {
				t.Fatalf("occurred_at %q: %v", at, err)
			}
			actor, _ := ev["actor"].(map[string]any)
			if actor["kind"] != "human" || actor["subject"] != "engineer@example.com" {
				t.Fatalf("actor %v", ev["actor"])
			}
			payload, _ := ev["payload"].(map[string]any)
			if payload["key"] != key || payload["title"] != "streamed "+proto {
				t.Fatalf("payload %v", ev["payload"])
			}
			for _, hidden := range []string{"organization_id", "project_id", "LogSeq"} {
				if _, ok := ev[hidden]; ok {
					t.Fatalf("event carries %s: %v", hidden, ev)
				}
			}
			e.do("POST", "/api/v1/items/"+key+"/transition", "engineer", map[string]any{"state": "ready", "version": num(item["version"])}).expect(t, 200)
			ev = c.nextEvent(t, "stream.event", "web", nil)
			if num(ev["seq"]) != seq+2 || ev["type"] != "item.state_changed" || ev["entity_key"] != key {
				t.Fatalf("event %v, want item.state_changed of %s numbered %d", ev, key, seq+2)
			}

			// A second socket replays after seq, then goes live; an item
			// stream (on a third: a call's reply skips notifications) sees
			// the item's events alone.
			r := e.mustRaw(t, proto)
			authAs(t, e, r, "engineer")
			now := subscribeOK(t, r, 2, map[string]any{"subscription": "replay", "stream": "project:WEB", "from_seq": seq})
			if now != seq+2 {
				t.Fatalf("seq %d, want the latest %d", now, seq+2)
			}
			for _, want := range []int64{seq + 1, seq + 2} {
				if got := num(r.nextEvent(t, "stream.event", "replay", nil)["seq"]); got != want {
					t.Fatalf("replayed seq %d, want %d", got, want)
				}
			}
			it := e.mustRaw(t, proto)
			authAs(t, e, it, "engineer")
			subscribeOK(t, it, 2, map[string]any{"subscription": "item", "stream": "item:" + key, "from_seq": 0})
			other := e.do("POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": "live"}).expect(t, 201).Body
			got := r.nextEvent(t, "stream.event", "replay", nil)
			if num(got["seq"]) != seq+3 || got["entity_key"] != other["key"] {
				t.Fatalf("live event %v, want %s numbered %d", got, other["key"], seq+3)
			}
			e.do("POST", "/api/v1/items/"+key+"/transition", "engineer", map[string]any{"state": "done", "version": 2}).expect(t, 200)
			var itemSeqs []int64
			for len(itemSeqs) < 3 {
				itemSeqs = append(itemSeqs, num(it.nextEvent(t, "stream.event", "item", nil)["seq"]))
			}
			if fmt.Sprint(itemSeqs) != fmt.Sprint([]int64{seq + 1, seq + 2, seq + 4}) {
				t.Fatalf("item stream %v, want %v (not the other item's %d)", itemSeqs, []int64{seq + 1, seq + 2, seq + 4}, seq+3)
			}
		})
	}
}

func TestRPCStreamUnsubscribeStopsEvents(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			c := e.mustRaw(t, proto)
			authAs(t, e, c, "viewer")
			subscribeOK(t, c, 2, map[string]any{"subscription": "gone", "stream": "project:WEB"})
			subscribeOK(t, c, 3, map[string]any{"subscription": "kept", "stream": "project:WEB"})
			r := c.call(t, 4, "stream.unsubscribe", map[string]any{"subscription": "gone"})
			if code, msg := rpcErr(r); code != 0 {
				t.Fatalf("unsubscribe: %d %s", code, msg)
			}
			if res, ok := r["result"].(map[string]any); !ok || len(res) != 0 {
				t.Fatalf("unsubscribe result %v, want {}", r["result"])
			}
			var stray []map[string]any
			for i := range 2 {
				it := e.do("POST", "/api/v1/projects/WEB/items", "engineer", map[string]any{"kind": "ticket", "title": fmt.Sprintf("after %d", i)}).expect(t, 201).Body
				for {
					ev := c.nextEvent(t, "stream.event", "kept", func(m map[string]any) {
						if p := m["params"].(map[string]any); p["subscription"] == "gone" {
							stray = append(stray, p)
						}
					})
					if ev["entity_key"] == it["key"] {
						break
					}
				}
			}
			if len(stray) != 0 {
				t.Fatalf("events after unsubscribe: %v", stray)
			}
			// The name is free again, and unsubscribing it twice is not found.
			expectErr(t, c.call(t, 5, "stream.unsubscribe", map[string]any{"subscription": "gone"}), api.RPCNotFound, `subscription "gone" not found`)
			subscribeOK(t, c, 6, map[string]any{"subscription": "gone", "stream": "project:WEB"})
		})
	}
}

func TestRPCStreamRefusals(t *testing.T) {
	t.Parallel()
	e := newRPCEnv(t, nil)
	ctx := context.Background()
	if _, err := e.db.CreateProject(ctx, e.org.ID, "API", "Api", store.SystemActor()); err != nil {
		t.Fatal(err)
	}
	before, err := e.db.LatestEventSeq(ctx, e.org.ID)
	if err != nil {
		t.Fatal(err)
	}
	// More than a replay may hold, in one transaction.
	if _, err := e.db.Pool().Exec(ctx, `
		INSERT INTO events (organization_id, project_id, type, entity_type, entity_id, actor_kind, actor_subject)
		SELECT $1, $2, 'test.bulk', 'test', g::text, 'system', 'system' FROM generate_series(1, $3::int) g`,
		e.org.ID, e.project.ID, store.MaxReplay+1); err != nil {
		t.Fatal(err)
	}
	sub := func(name, stream string) map[string]any {
		return map[string]any{"subscription": name, "stream": stream}
	}
	for _, proto := range both {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			for _, tt := range []struct {
				name  string
				as    string
				setup []map[string]any // stream.subscribe or planner.watch params that succeed first
				call  string
				param map[string]any
				code  int64
				msg   string
			}{
				{name: "unknown stream prefix", as: "viewer", call: "stream.subscribe", param: sub("s", "projects:WEB"), code: api.RPCInvalidParams, msg: `"projects:WEB" is not a stream`},
				{name: "missing key", as: "viewer", call: "stream.subscribe", param: sub("s", "project:"), code: api.RPCInvalidParams, msg: `"project:" names no project key`},
				{name: "bad key", as: "viewer", call: "stream.subscribe", param: sub("s", "item:web-1"), code: api.RPCInvalidParams, msg: `"web-1" is not an item key`},
				{name: "other organization's project", as: "engineer", call: "stream.subscribe", param: sub("s", "project:GLX"), code: api.RPCNotFound, msg: "project GLX not found"},
				{name: "absent item", as: "engineer", call: "stream.subscribe", param: sub("s", "item:WEB-999"), code: api.RPCNotFound, msg: "item WEB-999 not found"},
				{name: "project without tracker.read", as: "engineer", call: "stream.subscribe", param: sub("s", "project:API"), code: api.RPCForbidden, msg: "needs tracker.read"},
				{name: "duplicate subscription", as: "viewer", setup: []map[string]any{sub("dup", "project:WEB")},
					call: "stream.subscribe", param: sub("dup", "project:WEB"), code: api.RPCConflict, msg: `subscription "dup" is already in use on this connection`},
				{name: "a watch's name", as: "viewer", setup: []map[string]any{{"subscription": "w", "session": e.session}},
					call: "stream.subscribe", param: sub("w", "project:WEB"), code: api.RPCConflict, msg: `subscription "w" is already in use`},
				{name: "a stream's name for a watch", as: "viewer", setup: []map[string]any{sub("w", "project:WEB")},
					call: "planner.watch", param: map[string]any{"subscription": "w", "session": e.session}, code: api.RPCConflict, msg: `subscription "w" is already in use`},
				{name: "more than 1000 to replay", as: "viewer", call: "stream.subscribe",
					param: map[string]any{"subscription": "s", "stream": "project:WEB", "from_seq": before}, code: api.RPCResyncRequired,
					msg: fmt.Sprintf("more than 1000 events of project:WEB came after seq %d: reload and subscribe without from_seq", before)},
				{name: "unsubscribe unknown", as: "viewer", call: "stream.unsubscribe", param: map[string]any{"subscription": "nope"}, code: api.RPCNotFound, msg: `subscription "nope" not found on this connection`},
			} {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					c := e.mustRaw(t, proto)
					authAs(t, e, c, tt.as)
					for i, p := range tt.setup {
						method := "stream.subscribe"
						if _, ok := p["session"]; ok {
							method = "planner.watch"
						}
						if code, msg := rpcErr(c.call(t, 10+i, method, p)); code != 0 {
							t.Fatalf("%s %v: %d %s", method, p, code, msg)
						}
					}
					r := c.call(t, 7, tt.call, tt.param)
					expectErr(t, r, tt.code, tt.msg)
					// The refusal left nothing behind: the name is free or
					// still the first holder's, and the socket still answers.
					if len(tt.setup) == 0 && tt.call == "stream.subscribe" {
						subscribeOK(t, c, 8, sub(tt.param["subscription"].(string), "project:WEB"))
					}
					if code, msg := rpcErr(c.call(t, 9, "system.ping", nil)); code != 0 {
						t.Fatalf("ping after: %d %s", code, msg)
					}
				})
			}
		})
	}
}
