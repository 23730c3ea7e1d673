package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// WebhookDelivery is one POST to make: the outbox row that the
// transaction ending a turn with a webhook wrote (migration 00113).
type WebhookDelivery struct {
	// ID is the Standard Webhooks webhook-id: the same on every attempt.
	ID      string
	Turn    string
	URL     string
	Payload json.RawMessage
	// Attempts counts the attempts claimed so far, this one included.
	Attempts  int
	CreatedAt time.Time
}

// WebhookState is a delivery row as stored, for operators and tests.
type WebhookState struct {
	WebhookDelivery
	NextAttemptAt time.Time
	DeliveredAt   *time.Time
	FailedAt      *time.Time
	LastError     *string
}

// claimWebhooks takes up to $1 due deliveries, skipping those another
// sender holds, and puts each off by $2 seconds: the sender's lease on it.
// A sender that dies before it records the outcome leaves the row to come
// due again, so a delivery is made at least once.
const claimWebhooks = `UPDATE webhook_deliveries d SET attempts = d.attempts + 1,
		next_attempt_at = now() + make_interval(secs => $2)
	FROM (SELECT id FROM webhook_deliveries
		WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
		ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED) due
	WHERE d.id = due.id
	RETURNING d.id, d.turn_id::text, d.url, d.payload, d.attempts, d.created_at`

// ClaimWebhooks claims up to limit due deliveries for lease: no other
// sender claims them before the lease ends or the outcome is recorded.
func (db *DB) ClaimWebhooks(ctx context.Context, limit int, lease time.Duration) ([]WebhookDelivery, error) {
	rows, err := db.pool.Query(ctx, claimWebhooks, limit, lease.Seconds())
	if err != nil {
		return nil, fmt.Errorf("store: claim webhooks: %w", err)
	}
	out, err := collect(rows, scanWebhookDelivery)
	if err != nil {
		return nil, fmt.Errorf("store: claim webhooks: %w", err)
	}
	return out, nil
}

// WebhookDelivered records that the receiver accepted delivery id.
func (db *DB) WebhookDelivered(ctx context.Context, id string) error {
	if _, err := db.pool.Exec(ctx, `UPDATE webhook_deliveries SET delivered_at = now(), last_error = NULL
		WHERE id = $1 AND delivered_at IS NULL`, id); err != nil {
		return fmt.Errorf("store: webhook delivered: %w", err)
	}
	return nil
}

// WebhookRetry records a failed attempt of delivery id, to be tried again
// at next.
func (db *DB) WebhookRetry(ctx context.Context, id string, next time.Time, reason string) error {
	if _, err := db.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = $2, last_error = $3
		WHERE id = $1 AND delivered_at IS NULL`, id, next, reason); err != nil {
		return fmt.Errorf("store: webhook retry: %w", err)
	}
	return nil
}

// WebhookFailed records that delivery id is given up.
func (db *DB) WebhookFailed(ctx context.Context, id, reason string) error {
	if _, err := db.pool.Exec(ctx, `UPDATE webhook_deliveries SET failed_at = now(), last_error = $2
		WHERE id = $1 AND delivered_at IS NULL`, id, reason); err != nil {
		return fmt.Errorf("store: webhook failed: %w", err)
	}
	return nil
}

// WebhookOfTurn reads the delivery row of a turn; not found when the turn
// has none (no webhook, or not ended).
func (db *DB) WebhookOfTurn(ctx context.Context, turn string) (WebhookState, error) {
	w, err := scanWebhookState(db.pool.QueryRow(ctx, webhookOfTurnSQL, turn))
	if err != nil {
		return WebhookState{}, fmt.Errorf("store: webhook of turn: %w", notFound(err, "webhook of turn %q", turn))
	}
	return w, nil
}

// webhookOfTurnSQL reads the delivery row of a turn, the columns
// scanWebhookState reads.
const webhookOfTurnSQL = `SELECT id, turn_id::text, url, payload, attempts, created_at,
		next_attempt_at, delivered_at, failed_at, last_error
	FROM webhook_deliveries WHERE turn_id = $1`

func scanWebhookDelivery(row pgx.Row) (WebhookDelivery, error) {
	var d WebhookDelivery
	err := row.Scan(&d.ID, &d.Turn, &d.URL, &d.Payload, &d.Attempts, &d.CreatedAt)
	return d, err
}

func scanWebhookState(row pgx.Row) (WebhookState, error) {
	var w WebhookState
	err := row.Scan(&w.ID, &w.Turn, &w.URL, &w.Payload, &w.Attempts,
		&w.CreatedAt, &w.NextAttemptAt, &w.DeliveredAt, &w.FailedAt, &w.LastError)
	return w, err
}
