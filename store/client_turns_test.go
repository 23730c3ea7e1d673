package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/balletplanner/ballet/store"
)

// TestClientTurnIDsAreScopedToTheirSession: two sessions may send with the
// same client turn id, each getting a turn of its own, and a retry in one
// session still returns that session's turn.
func TestClientTurnIDsAreScopedToTheirSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	var sessions []string
	for range 2 {
		s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "plan")
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s.ID)
	}
	client := uuid.NewString()
	first, err := f.db.SendMessage(ctx, f.engineer, sessions[0], "hello", client, store.QueueLimits{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.db.SendMessage(ctx, f.engineer, sessions[1], "hello there", client, store.QueueLimits{})
	if err != nil {
		t.Fatalf("the same client turn id in another session: %v", err)
	}
	if second.Existing || second.Turn == first.Turn {
		t.Fatalf("second session's send %+v is the first session's turn %+v", second, first)
	}
	if first.Turn != client {
		t.Fatalf("first turn %s, want the client's id %s", first.Turn, client)
	}
	tests := []struct {
		name    string
		session string
		want    store.SendResult
	}{
		{"retry in the first session", sessions[0], first},
		{"retry in the second session", sessions[1], second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			again, err := f.db.SendMessage(ctx, f.engineer, tt.session, "hello", client, store.QueueLimits{})
			if err != nil {
				t.Fatal(err)
			}
			if !again.Existing || again.Turn != tt.want.Turn || again.Seq != tt.want.Seq {
				t.Fatalf("retry %+v, want the turn %+v", again, tt.want)
			}
		})
	}
	var turns, messages int
	if err := f.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM planner_turns),
		(SELECT count(*) FROM planner_messages)`).Scan(&turns, &messages); err != nil {
		t.Fatal(err)
	}
	if turns != 2 || messages != 2 {
		t.Fatalf("%d turns and %d messages, want 2 and 2", turns, messages)
	}
	for i, s := range sessions {
		var text string
		if err := f.db.Pool().QueryRow(ctx, `SELECT m.content->0->>'text' FROM planner_turns t
			JOIN planner_messages m ON m.session_id = t.session_id AND m.seq = t.message_seq
			WHERE t.session_id = $1 AND t.client_turn_id = $2`, s, client).Scan(&text); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if want := []string{"hello", "hello there"}[i]; text != want {
			t.Fatalf("session %d's turn holds %q, want %q", i, text, want)
		}
	}
}
