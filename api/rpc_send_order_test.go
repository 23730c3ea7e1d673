package api_test

import (
	"fmt"
	"testing"

	"github.com/balletplanner/ballet/api"
)

// A human's quick messages on one socket, sent without waiting for the
// replies, are stored in the order they were sent, and each turn's queued
// output replays the human's message it answers.
func TestRPCSendsOnOneSocketAreStoredInOrder(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{api.SubprotocolJSON, api.SubprotocolMsgpack} {
		t.Run(protoName(proto), func(t *testing.T) {
			t.Parallel()
			e := newRPCEnv(t, nil)
			c := e.mustRaw(t, proto)
			if m := c.call(t, 1, "auth", map[string]any{"token": e.tokens["engineer"]}); m["error"] != nil {
				t.Fatalf("auth: %v", m)
			}
			const n = 12
			for i := range n {
				c.send(t, map[string]any{"jsonrpc": "2.0", "id": 100 + i, "method": "planner.send",
					"params": map[string]any{"session": e.session, "text": fmt.Sprintf("message %d", i)}})
			}
			turns := map[int64]string{}
			for range n {
				m, closed := c.reply(t)
				if closed != 0 || m["error"] != nil {
					t.Fatalf("send: %v (closed %d)", m, closed)
				}
				res := m["result"].(map[string]any)
				turns[num(m["id"])-100] = res["turn"].(string)
			}
			r := e.do("GET", "/api/v1/planner/sessions/"+e.session+"/outputs", "viewer", nil).expect(t, 200)
			var got []string
			for _, it := range r.Body["items"].([]any) {
				o := it.(map[string]any)
				if o["type"] != "queued" {
					continue
				}
				content, _ := o["content"].([]any)
				if o["role"] != "user" || len(content) != 1 || o["seq"] == nil {
					t.Fatalf("queued output without the human's message: %v", o)
				}
				text := content[0].(map[string]any)["text"].(string)
				if want := fmt.Sprintf("message %d", len(got)); text != want || o["turn"] != turns[int64(len(got))] {
					t.Fatalf("queued output %d is %q of turn %v, want %q of turn %s", len(got), text, o["turn"], want, turns[int64(len(got))])
				}
				got = append(got, text)
			}
			if len(got) != n {
				t.Fatalf("%d queued outputs, want %d: %s", len(got), n, r.Raw)
			}
			s := e.do("GET", "/api/v1/planner/sessions/"+e.session, "viewer", nil).expect(t, 200)
			var texts []string
			for _, it := range s.Body["messages"].([]any) {
				msg := it.(map[string]any)
				if msg["role"] == "user" {
					texts = append(texts, msg["content"].([]any)[0].(map[string]any)["text"].(string))
				}
			}
			for i, text := range texts {
				if want := fmt.Sprintf("message %d", i); text != want {
					t.Fatalf("stored messages %q, want them in the order sent", texts)
				}
			}
		})
	}
}
