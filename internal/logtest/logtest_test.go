package logtest_test

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/balletplanner/ballet/internal/logtest"
)

func TestBufferFindsRecordsWrittenConcurrently(t *testing.T) {
	t.Parallel()
	var b logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { log.Info("request", "path", "/rpc", "status", 101+i%2) })
	}
	wg.Wait()
	log.Warn("other")
	tests := []struct {
		name  string
		msg   string
		match map[string]string
		want  int
	}{
		{"by message", "request", nil, 20},
		{"by string field", "request", map[string]string{"path": "/rpc"}, 20},
		{"by number field", "request", map[string]string{"status": "101"}, 10},
		{"field absent", "request", map[string]string{"nope": "x"}, 0},
		{"other message", "other", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := len(b.Find(t, tt.msg, tt.match)); got != tt.want {
				t.Fatalf("Find(%q, %v) = %d records, want %d", tt.msg, tt.match, got, tt.want)
			}
		})
	}
	if n := len(b.Records(t)); n != 21 {
		t.Fatalf("%d records, want 21", n)
	}
}
