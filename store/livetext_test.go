package store_test

import (
	"testing"

	"github.com/balletplanner/ballet/store"
)

func TestLiveTextStitches(t *testing.T) {
	t.Parallel()
	text := func(attempt, after, end int64, s string) store.Output {
		return store.Output{Turn: "t1", Type: store.OutputText, Attempt: attempt, TextAfter: after, TextEnd: end, Text: s}
	}
	for _, tc := range []struct {
		name string
		outs []store.Output
		want string
	}{
		{"deltas in order", []store.Output{text(100, 2, 5, "Hello"), text(100, 2, 11, " world")}, "Hello world"},
		{"a repeated delta", []store.Output{text(100, 2, 5, "Hello"), text(100, 2, 5, "Hello"), text(100, 2, 11, " world")}, "Hello world"},
		{"a resume snapshot over deltas shown", []store.Output{text(100, 2, 5, "Hello"), text(100, 2, 11, "Hello world")}, "Hello world"},
		{"an overlapping delta", []store.Output{text(100, 2, 8, "Hello wo"), text(100, 2, 11, " world")}, "Hello world"},
		{"a stale worker's delta", []store.Output{text(200, 2, 8, "Recorded"), text(100, 2, 20, "Writing a note. More")}, "Recorded"},
		{"a takeover starts over", []store.Output{text(100, 2, 15, "Writing a note."), text(200, 2, 8, "Recorded")}, "Recorded"},
		{"a gap is not filled", []store.Output{text(100, 2, 5, "Hello"), text(100, 2, 20, "later")}, "Hello"},
		{"a round that is over", []store.Output{text(100, 5, 4, "Next"), text(100, 2, 9, "old round")}, "Next"},
		{"the next round", []store.Output{text(100, 2, 5, "Hello"), {Turn: "t1", Type: store.OutputMessage, Cursor: 3}, text(100, 3, 4, "Next")}, "Next"},
		{"a late delta after its message", []store.Output{text(100, 2, 5, "Hello"), {Turn: "t1", Type: store.OutputMessage, Cursor: 3}, text(100, 2, 11, " world")}, ""},
		{"without a place", []store.Output{{Turn: "t1", Type: store.OutputText, Text: "a"}, {Turn: "t1", Type: store.OutputText, Text: "b"}}, "ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var l store.LiveText
			for _, o := range tc.outs {
				l.Add(o)
			}
			if got := l.Text(); got != tc.want {
				t.Fatalf("text = %q, want %q", got, tc.want)
			}
		})
	}
}
