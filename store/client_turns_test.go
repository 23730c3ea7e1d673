package store_test

import (
	"context"
	"strings"
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

// TestClientTurnKeys: a client turn id is any 1-255 printable ASCII
// characters. A key that is not a UUID gets a turn id of the server's, and a
// retry with the key answers that turn again; a UUID key is the turn's own
// id, in any letter case.
func TestClientTurnKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "keys")
	if err != nil {
		t.Fatal(err)
	}
	upper := strings.ToUpper(uuid.NewString())
	tests := []struct {
		name, key, retry string
		// turn is the turn id wanted; "" wants a fresh UUID.
		turn string
	}{
		{"probe key", "probe-1796612345-0", "probe-1796612345-0", ""},
		{"one character", "1", "1", ""},
		{"spaces and punctuation", " a key: {x} ~ ", " a key: {x} ~ ", ""},
		{"255 characters", strings.Repeat("k", 254) + "~", strings.Repeat("k", 254) + "~", ""},
		{"upper-case UUID", upper, strings.ToLower(upper), strings.ToLower(upper)},
	}
	for _, tt := range tests {
		// Not parallel: each subtest sends to the same session.
		first, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hello "+tt.name, tt.key, store.QueueLimits{})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if _, err := uuid.Parse(first.Turn); err != nil || len(first.Turn) != 36 || first.Turn != strings.ToLower(first.Turn) {
			t.Fatalf("%s: turn id %q is not a canonical UUID", tt.name, first.Turn)
		}
		if tt.turn != "" && first.Turn != tt.turn {
			t.Fatalf("%s: turn %s, want %s", tt.name, first.Turn, tt.turn)
		}
		again, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hello "+tt.name, tt.retry, store.QueueLimits{})
		if err != nil {
			t.Fatalf("%s: retry: %v", tt.name, err)
		}
		if !again.Existing || again.Turn != first.Turn || again.Seq != first.Seq || again.Position != first.Position {
			t.Fatalf("%s: retry %+v, want the turn %+v", tt.name, again, first)
		}
	}
	var turns, messages int
	if err := f.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM planner_turns),
		(SELECT count(*) FROM planner_messages)`).Scan(&turns, &messages); err != nil {
		t.Fatal(err)
	}
	if turns != len(tests) || messages != len(tests) {
		t.Fatalf("%d turns and %d messages, want %d of each", turns, messages, len(tests))
	}
}

// TestClientTurnKeyRefusals: a key that is too long or not printable ASCII
// is refused naming turn, and nothing is written.
func TestClientTurnKeyRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newTrackerFixture(t)
	s, err := f.db.CreateSession(ctx, f.engineer, "WEB", "keys")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, key, msg string }{
		{"256 characters", strings.Repeat("k", 256), "got 256 bytes"},
		{"delete character", "a\x7f", "got byte 0x7f at offset 1"},
		{"tab", "\tkey", "got byte 0x09 at offset 0"},
		{"not ASCII", "clé", "got byte 0xc3 at offset 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.db.SendMessage(ctx, f.engineer, s.ID, "hello", tt.key, store.QueueLimits{})
			const want = "turn: must be 1-255 printable ASCII characters"
			if !store.IsCode(err, store.CodeInvalid) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want invalid_argument %q … %q", err, want, tt.msg)
			}
		})
	}
	if err := store.CheckClientTurn(""); err == nil || !strings.Contains(err.Error(), "got an empty string") {
		t.Fatalf("empty key: %v", err)
	}
	var rows int
	if err := f.db.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM planner_turns) + (SELECT count(*) FROM planner_messages)
		+ (SELECT count(*) FROM planner_outputs)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("refused sends wrote %d rows", rows)
	}
}
