package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/store/storetest"
	"github.com/balletplanner/ballet/worker/dispatch"
)

// jsonLog is a slog JSON sink written from many goroutines.
type jsonLog struct{ logtest.Buffer }

// find is the records with message msg whose key has the value want.
func (b *jsonLog) find(t *testing.T, msg, key, want string) []map[string]any {
	t.Helper()
	return b.Find(t, msg, map[string]string{key: want})
}

// TestRequestIDReachesGateway: a turn sent under a request id (the api's
// access log id, see api.TestSendCarriesRequestID) logs it in the worker's
// lines of the turn and sends it to the gateway, which logs it as the
// caller's beside its own; a turn sent without one logs none.
func TestRequestIDReachesGateway(t *testing.T) {
	t.Parallel()
	// Through the dispatcher, which takes the id from the turn's row.
	e := newEnv(t, twoRounds).fair(dispatch.Config{})
	logs := &jsonLog{}
	e.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.deps.Log = e.log
	viaGateway(t, e)
	e.start()

	s := e.session()
	ctx := requestid.With(context.Background(), "req-trace-7")
	res, err := e.planner.Send(ctx, e.human, s, "plan it", "")
	must(t, err)
	e.waitDone(s, res.Turn)
	storetest.WaitFor(t, "the turn's end logged with its request id", func() bool {
		return len(logs.find(t, "turn ended", "request_id", "req-trace-7")) == 1
	})
	calls := logs.find(t, "llm call", "caller_request_id", "req-trace-7")
	if len(calls) < 3 { // the three rounds of twoRounds (more if a round was retried)
		t.Fatalf("gateway lines with caller_request_id: %v, want one per round (3)", calls)
	}
	for _, c := range calls {
		if id, _ := c["request_id"].(string); !strings.HasPrefix(id, "gwreq_") {
			t.Errorf("gateway line %v: want its own request_id beside the caller's", c)
		}
	}
	if ended := logs.find(t, "turn ended", "turn", res.Turn); len(ended) != 1 || ended[0]["request_id"] != "req-trace-7" {
		t.Fatalf("turn ended lines %v", ended)
	}

	// A send without an id: the turn's lines carry none.
	second := e.send(s, "plan it")
	e.waitDone(s, second.Turn)
	storetest.WaitFor(t, "the second turn's end logged", func() bool {
		return len(logs.find(t, "turn ended", "turn", second.Turn)) == 1
	})
	if got := logs.find(t, "turn ended", "turn", second.Turn)[0]["request_id"]; got != nil {
		t.Errorf("second turn logged request_id %v, want none", got)
	}
}
