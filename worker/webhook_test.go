package worker_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/balletplanner/ballet/internal/webhooks"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// TestWebhookOfAnsweredTurn: a turn sent with a webhook that the model
// answers (end_turn) is POSTed once, signed, with its final text.
func TestWebhookOfAnsweredTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cancelScript)
	e.start()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("an example key of 32 bytes long!"))
	wh, err := standardwebhooks.NewWebhook(secret)
	must(t, err)
	var mu sync.Mutex
	var bodies [][]byte
	var verifyErrs []error
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, verifyErrs = append(bodies, body), append(verifyErrs, wh.Verify(body, r.Header))
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	cfg := webhooks.DefaultConfig()
	cfg.AllowedHosts, cfg.AllowPrivateNetworks, cfg.SigningSecret = []string{recv.URL}, true, secret
	cfg.PollInterval = 10 * time.Millisecond
	s, err := webhooks.NewSender(cfg, e.db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(os.Stderr, nil)))
	must(t, err)
	must(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)

	session := e.session()
	res, err := e.planner.Submit(context.Background(), e.human, store.SendRequest{Session: session, Text: "hello",
		Webhook: recv.URL + "/done"})
	must(t, err)
	e.waitDone(session, res.Turn)
	storetest.WaitFor(t, "the webhook delivered", func() bool {
		w, err := e.db.WebhookOfTurn(context.Background(), res.Turn)
		return err == nil && w.DeliveredAt != nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || verifyErrs[0] != nil {
		t.Fatalf("%d posts, signature %v", len(bodies), verifyErrs)
	}
	var p map[string]any
	must(t, json.Unmarshal(bodies[0], &p))
	want := map[string]any{"type": "turn.done", "turn": res.Turn, "session": session, "project": "WEB",
		"status": "done", "reason": "end_turn", "message": "Quick answer."}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("payload %s = %v, want %v (%s)", k, p[k], v, bodies[0])
		}
	}
}
