package webhooks_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/balletplanner/ballet/internal/webhooks"
	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/store/storetest"
)

// testSecret is a signing secret of 32 bytes.
var testSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// hit is one POST a receiver got: its body, checked signature and id.
type hit struct {
	id   string
	body []byte
	err  error // the signature check's
}

// receiver is an httptest server that checks each POST's signature with
// the Standard Webhooks library and answers the statuses given in turn
// (the last one from then on).
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	hits     []hit
	statuses []int
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{statuses: statuses}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{id: req.Header.Get("webhook-id"), body: body, err: wh.Verify(body, req.Header)})
		status := r.statuses[min(len(r.hits), len(r.statuses))-1]
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// env is a project with a session on a database of the test's own.
type env struct {
	t       *testing.T
	db      *store.DB
	human   store.Caller
	session string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	fx := storetest.NewProject(t)
	db := fx.DB
	e := &env{t: t, db: db, human: fx.Human}
	s, err := db.CreateSession(ctx, e.human, "WEB", "plan")
	must(t, err)
	e.session = s.ID
	return e
}

// cancelledTurn sends a message with webhook url and cancels its turn
// while queued: the turn ends done "cancelled" and its delivery is due.
func (e *env) cancelledTurn(url string) string {
	e.t.Helper()
	ctx := context.Background()
	res, err := e.db.Send(ctx, e.human, store.SendRequest{Session: e.session, Text: "plan it", Webhook: url}, store.QueueLimits{})
	must(e.t, err)
	_, err = e.db.CancelTurns(ctx, e.human, e.session, res.Turn)
	must(e.t, err)
	return res.Turn
}

// config allows the receiver's loopback address, with fast retries.
func config(r *receiver) webhooks.Config {
	c := webhooks.DefaultConfig()
	c.AllowedHosts = []string{r.srv.URL}
	c.AllowPrivateNetworks = true
	c.SigningSecret = testSecret
	c.RetryBase = 10 * time.Millisecond
	c.PollInterval = 10 * time.Millisecond
	return c
}

// startSender runs a sender until the test ends.
func startSender(t *testing.T, db *store.DB, c webhooks.Config) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := webhooks.NewSender(c, db, prometheus.NewRegistry(), log)
	must(t, err)
	must(t, s.Start(context.Background()))
	t.Cleanup(s.Stop)
}

// waitEnded polls until the turn's delivery is delivered or given up.
func (e *env) waitEnded(turn string) store.WebhookState {
	e.t.Helper()
	var w store.WebhookState
	storetest.WaitFor(e.t, "turn "+turn+"'s webhook delivered or given up", func() bool {
		var err error
		w, err = e.db.WebhookOfTurn(context.Background(), turn)
		must(e.t, err)
		return w.DeliveredAt != nil || w.FailedAt != nil
	})
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCancelledTurnIsDeliveredSigned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, http.StatusNoContent)
	turn := e.cancelledTurn(r.srv.URL + "/hooks/ballet?source=test")
	startSender(t, e.db, config(r))
	w := e.waitEnded(turn)
	if w.DeliveredAt == nil || w.Attempts != 1 {
		t.Fatalf("delivery = %+v", w)
	}
	hits := r.got()
	if len(hits) != 1 || hits[0].err != nil || hits[0].id != w.ID {
		t.Fatalf("hits = %+v, want one with id %s and a valid signature", hits, w.ID)
	}
	var p map[string]any
	must(t, json.Unmarshal(hits[0].body, &p))
	want := map[string]any{"type": "turn.done", "turn": turn, "session": e.session, "project": "WEB",
		"status": "cancelled", "reason": store.ReasonCancelled, "message": nil}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("payload %s = %v, want %v (%s)", k, p[k], v, hits[0].body)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, p["done_at"].(string)); err != nil {
		t.Errorf("done_at: %v", err)
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		statuses      []int
		wantHits      int
		wantDelivered bool
		wantError     string
	}{
		{"500 then 200", []int{500, 200}, 2, true, ""},
		{"429 then 503 then 200", []int{429, 503, 200}, 3, true, ""},
		{"400 stops", []int{400, 200}, 1, false, "answered 400"},
		{"redirect is not followed", []int{302, 200}, 1, false, "answered 302"},
		{"500 until max attempts", []int{500}, 3, false, "giving up after 3 attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			r := newReceiver(t, tt.statuses...)
			turn := e.cancelledTurn(r.srv.URL + "/hook")
			c := config(r)
			c.MaxAttempts = 3
			startSender(t, e.db, c)
			w := e.waitEnded(turn)
			hits := r.got()
			if len(hits) != tt.wantHits || (w.DeliveredAt != nil) != tt.wantDelivered || w.Attempts != tt.wantHits {
				t.Fatalf("%d hits, delivery %+v; want %d hits, delivered %v", len(hits), w, tt.wantHits, tt.wantDelivered)
			}
			for _, h := range hits {
				if h.id != w.ID || h.err != nil || string(h.body) != string(hits[0].body) {
					t.Fatalf("hit %+v: want id %s, a valid signature and the same body", h, w.ID)
				}
			}
			if tt.wantError != "" && (w.LastError == nil || !contains(*w.LastError, tt.wantError)) {
				t.Fatalf("last_error = %v, want %q", w.LastError, tt.wantError)
			}
		})
	}
}

// TestPrivateAddressRefusedAtDial: a host the operator lists that
// resolves to a loopback address is not dialled without
// allow_private_networks, and the delivery is given up.
func TestPrivateAddressRefusedAtDial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, 200)
	c := config(r)
	turn := e.cancelledTurn(r.srv.URL + "/hook") // checked at send by the api, not here
	c.AllowPrivateNetworks = false
	startSender(t, e.db, c)
	w := e.waitEnded(turn)
	if w.FailedAt == nil || w.LastError == nil || !contains(*w.LastError, "private") || len(r.got()) != 0 {
		t.Fatalf("delivery = %+v, hits %d", w, len(r.got()))
	}
}

func TestRacingSendersDeliverEachOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, 200)
	const n = 30
	turns := make([]string, n)
	for i := range turns {
		turns[i] = e.cancelledTurn(r.srv.URL + "/hook")
	}
	startSender(t, e.db, config(r))
	startSender(t, e.db, config(r))
	for _, turn := range turns {
		e.waitEnded(turn)
	}
	seen := map[string]int{}
	for _, h := range r.got() {
		seen[h.id]++
	}
	if len(seen) != n {
		t.Fatalf("%d ids delivered, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s delivered %d times", id, c)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
