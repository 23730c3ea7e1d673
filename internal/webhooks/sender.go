package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/balletplanner/ballet/internal/ssrf"
	"github.com/balletplanner/ballet/internal/startstop"
	"github.com/balletplanner/ballet/store"
)

// Outcomes of a delivery attempt, the outcome label of
// ballet_webhook_deliveries_total.
const (
	OutcomeDelivered = "delivered" // the receiver answered 2xx
	OutcomeRetry     = "retry"     // a network error, 408, 429 or 5xx: tried again later
	OutcomeFailed    = "failed"    // another answer, or the last attempt: given up
)

// claimBatch bounds the deliveries a sender claims per poll.
const claimBatch = 16

// maxBackoff caps the wait between two attempts.
const maxBackoff = time.Hour

// deliveryStore is where a Sender finds due deliveries and records their
// outcomes; *store.DB provides it.
type deliveryStore interface {
	ClaimWebhooks(ctx context.Context, limit int, lease time.Duration) ([]store.WebhookDelivery, error)
	WebhookDelivered(ctx context.Context, id string) error
	WebhookRetry(ctx context.Context, id string, next time.Time, reason string) error
	WebhookFailed(ctx context.Context, id, reason string) error
}

// Sender POSTs the due deliveries of the outbox, every poll interval, in
// the background. Each claim holds a row for one attempt (FOR UPDATE SKIP
// LOCKED, then a lease), so senders in several processes deliver each
// attempt once; a sender that dies mid-attempt leaves the row to come due
// again, with the same webhook-id: at least once.
type Sender struct {
	cfg    Config
	db     deliveryStore
	policy *Policy
	signer *standardwebhooks.Webhook
	client *http.Client
	log    *slog.Logger
	count  *prometheus.CounterVec

	life startstop.Base
}

// NewSender builds the sender of a valid configuration; its counter is
// registered on reg.
func NewSender(cfg Config, db deliveryStore, reg prometheus.Registerer, log *slog.Logger) (*Sender, error) {
	policy, err := NewPolicy(cfg)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	signer, err := standardwebhooks.NewWebhook(cfg.SigningSecret)
	if err != nil {
		return nil, fmt.Errorf("webhooks: signing secret: %w", err)
	}
	count := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ballet_webhook_deliveries_total",
		Help: "Webhook delivery attempts by outcome: delivered (2xx), retry (network error, 408, 429, 5xx) or failed (given up).",
	}, []string{"outcome"})
	if err := reg.Register(count); err != nil {
		return nil, fmt.Errorf("webhooks: register metrics: %w", err)
	}
	for _, o := range []string{OutcomeDelivered, OutcomeRetry, OutcomeFailed} {
		count.WithLabelValues(o)
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: ssrf.DialControl(cfg.AllowPrivateNetworks)}
	client := &http.Client{
		Timeout: cfg.Timeout,
		// No proxy: the dial check must see the receiver's own address.
		Transport: &http.Transport{DialContext: dialer.DialContext, ForceAttemptHTTP2: true,
			TLSHandshakeTimeout: cfg.Timeout, MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute},
		// A redirect is not followed: it could lead anywhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Sender{cfg: cfg, db: db, policy: policy, signer: signer, client: client, log: log, count: count}, nil
}

// Start delivers in the background until Stop.
func (s *Sender) Start(ctx context.Context) error {
	if _, ok := s.life.StartInit(ctx); ok {
		s.life.Go(s.run)
	}
	return nil
}

// Stop stops the polls and waits for the attempts under way; safe before
// Start and twice.
func (s *Sender) Stop() { s.life.Stop() }

func (s *Sender) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		// A full batch means more may be due: claim again at once.
		for s.poll(ctx) == claimBatch && ctx.Err() == nil {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll claims the due deliveries and makes one attempt of each; it
// returns how many it claimed.
func (s *Sender) poll(ctx context.Context) int {
	due, err := s.db.ClaimWebhooks(ctx, claimBatch, s.cfg.Timeout+30*time.Second)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "claim webhooks", slog.Any("error", err))
		}
		return 0
	}
	var wg sync.WaitGroup
	for _, d := range due {
		wg.Go(func() { s.attempt(ctx, d) })
	}
	wg.Wait()
	return len(due)
}

// attempt POSTs d once and records the outcome.
func (s *Sender) attempt(ctx context.Context, d store.WebhookDelivery) {
	status, err := s.post(ctx, d)
	outcome, reason := classify(status, err)
	if outcome == OutcomeRetry && ctx.Err() != nil {
		return // stopping: the lease brings it back
	}
	if outcome == OutcomeRetry && (d.Attempts >= s.cfg.MaxAttempts || time.Since(d.CreatedAt) >= s.cfg.MaxAge) {
		outcome, reason = OutcomeFailed, reason+"; giving up after "+strconv.Itoa(d.Attempts)+" attempts"
	}
	var rerr error
	switch outcome {
	case OutcomeDelivered:
		rerr = s.db.WebhookDelivered(ctx, d.ID)
	case OutcomeRetry:
		next := time.Now().Add(backoff(s.cfg.RetryBase, d.Attempts))
		rerr = s.db.WebhookRetry(ctx, d.ID, next, reason)
		s.log.WarnContext(ctx, "webhook attempt failed; will retry", slog.String("webhook_id", d.ID),
			slog.String("turn", d.Turn), slog.Int("attempt", d.Attempts), slog.String("error", reason),
			slog.Time("next_attempt_at", next))
	case OutcomeFailed:
		rerr = s.db.WebhookFailed(ctx, d.ID, reason)
		s.log.WarnContext(ctx, "webhook attempt failed; giving up", slog.String("webhook_id", d.ID),
			slog.String("turn", d.Turn), slog.Int("attempt", d.Attempts), slog.String("error", reason))
	}
	s.count.WithLabelValues(outcome).Inc()
	if rerr != nil {
		s.log.WarnContext(ctx, "record webhook outcome", slog.String("webhook_id", d.ID), slog.Any("error", rerr))
	}
}

// errNotAllowed is a stored URL the policy no longer allows.
var errNotAllowed = errors.New("not allowed")

// post signs and sends d; status is the receiver's answer, 0 with err
// when there was none.
func (s *Sender) post(ctx context.Context, d store.WebhookDelivery) (int, error) {
	if err := s.policy.allows(d.URL); err != nil {
		return 0, fmt.Errorf("%w: %w", errNotAllowed, err)
	}
	now := time.Now()
	sig, err := s.signer.Sign(d.ID, now, d.Payload)
	if err != nil {
		return 0, fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Payload))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNotAllowed, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ballet-webhooks")
	req.Header.Set(standardwebhooks.HeaderWebhookID, d.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// classify maps an attempt's answer to its outcome and the error to record.
func classify(status int, err error) (outcome, reason string) {
	switch {
	case errors.Is(err, errNotAllowed), errors.Is(err, ssrf.ErrPrivateAddress):
		return OutcomeFailed, err.Error()
	case err != nil:
		return OutcomeRetry, err.Error()
	case status >= 200 && status < 300:
		return OutcomeDelivered, ""
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
		return OutcomeRetry, "answered " + strconv.Itoa(status)
	}
	return OutcomeFailed, "answered " + strconv.Itoa(status)
}

// backoff is the wait after a delivery's attempt-th failed attempt:
// exponential from base, capped at maxBackoff, with half of it jittered
// so that the retries of many deliveries spread out.
func backoff(base time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}
