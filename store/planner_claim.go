package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrLeaseLost means another worker took the session's turn lease: the
// caller must stop writing for that turn at once.
var ErrLeaseLost = errors.New("store: session lease lost")

// Fence identifies the holder of a session's turn lease. Every write a
// running turn makes checks it, so a worker that lost its lease (stalled,
// partitioned) cannot write over its successor.
type Fence struct {
	Session string
	Turn    string
	Token   int64
	// Human is the turn's author, whom the planner acts for.
	Human string
}

// ClaimState says what ClaimTurn found.
type ClaimState int

// Claim outcomes.
const (
	// ClaimRun: the caller holds the lease and runs (or resumes) the turn.
	ClaimRun ClaimState = iota
	// ClaimFinished: the turn already ended; nothing to do.
	ClaimFinished
	// ClaimCancelled: the turn was cancelled before it started; Outputs
	// holds its done output and Next the session's next turn to enqueue.
	ClaimCancelled
	// ClaimWaiting: an earlier turn of the session is still open; this one
	// is enqueued again when that one ends.
	ClaimWaiting
	// ClaimBusy: another worker holds a live lease on the session.
	ClaimBusy
	// ClaimFailed: the turn was tried MaxTurnAttempts times without ending;
	// it is ended as failed (Outputs, Next as for ClaimCancelled).
	ClaimFailed
)

// MaxTurnAttempts bounds how often a turn is started or resumed: a turn that
// fails the same way every time ends instead of calling the model forever.
const MaxTurnAttempts = 10

// Claim is the result of ClaimTurn.
type Claim struct {
	State   ClaimState
	Fence   Fence
	Turn    Turn
	Session Session
	// Outputs are stored outputs to publish (started, or done on cancel).
	Outputs []Output
	// Next is the session's next queued turn, when this claim ended one.
	Next string
	// History is what the claimed turn sees, read under the claim's lock
	// (ClaimRun only): LoadHistory's answer at the claim.
	History *History
	// Trace is the turn's trace context and its previous attempt's, for
	// the spans of the attempt (nil while tracing is off).
	Trace ClaimTrace
}

// ClaimTrace is what a claim reads of a turn's trace: the send's trace
// context, the span context of the attempt before this one (set when it
// started), and when the turn began to wait for a worker: when it was
// enqueued, else when it became ready to run (the head of its session).
type ClaimTrace struct {
	Context     map[string]string
	LastAttempt map[string]string
	WaitingFrom time.Time
}

// ClaimTurn takes the session's turn lease for turnID, in arrival order:
// only the oldest open turn of a session may run, and only while no other
// worker holds a live lease. A new lease gets a fresh fencing token.
func (db *DB) ClaimTurn(ctx context.Context, turnID, owner string, lease time.Duration) (Claim, error) {
	var c Claim
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		var l claimLease
		var earlier bool
		var t Turn
		// One round trip: lock the session row, then read the turn under
		// the lock (cancel and finish take it too); each statement of a
		// batch sees what committed before it ran.
		b := &pgx.Batch{}
		b.Queue(`SELECT set_config('lock_timeout', $1, true)`, claimLockTimeoutMS)
		b.Queue(claimLock, turnID).QueryRow(func(row pgx.Row) (err error) {
			l, err = scanClaimLease(row)
			return notFound(err, "turn %q", turnID)
		})
		b.Queue(`SELECT `+turnColumns+`, EXISTS (SELECT 1 FROM planner_turns e
			WHERE e.session_id = t.session_id AND e.position < t.position AND e.finished_at IS NULL),
			trace_context, attempt_trace_context, COALESCE(enqueued_at, ready_at, created_at)
			FROM planner_turns t WHERE id = $1`, turnID).QueryRow(func(row pgx.Row) (err error) {
			t, err = scanTurn(row, &earlier, &c.Trace.Context, &c.Trace.LastAttempt, &c.Trace.WaitingFrom)
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		c.Turn = t
		if t.FinishedAt != nil {
			c.State = ClaimFinished
			return nil
		}
		var err error
		switch {
		case earlier:
			c.State = ClaimWaiting
			return nil
		case l.Live:
			c.State = ClaimBusy
			return nil
		case t.CancelRequested && t.Status == TurnQueued:
			c.State = ClaimCancelled
			c.Outputs, c.Next, err = db.finishTurn(ctx, tx, t, TurnOutcome{Status: TurnCancelled, Reason: ReasonCancelled})
			return err
		case t.Attempts >= MaxTurnAttempts:
			c.State = ClaimFailed
			c.Outputs, c.Next, err = db.finishTurn(ctx, tx, t, TurnOutcome{Status: TurnFailed, Reason: ReasonError,
				Err: fmt.Sprintf("The turn was stopped after %d attempts that did not complete. Send a new message to try again.", t.Attempts)})
			return err
		}
		c.State = ClaimRun
		c.Fence = Fence{Session: t.Session, Turn: t.ID, Token: l.Token + 1, Human: t.Author}
		// One more round trip: one statement for the lease and the started
		// output's cursor (the row is locked, so the cursor read above is
		// still the next one) in the session row's one UPDATE, the turn's
		// start and its started output; then the turn's history.
		var started []Output
		if t.StartedAt == nil {
			started = []Output{{Turn: t.ID, Type: OutputStarted}}
		}
		args := []any{t.Session, owner, c.Fence.Token, lease.String(), len(started), t.ID}
		write := claimWrite
		if len(started) > 0 {
			c.Outputs = storedOutputs(t.Session, l.Cursor, l.At, started)
			write, args = claimWriteStarted, append(args, l.Cursor, storedData(c.Outputs[0]), l.At)
		}
		// The turn's history rides along: its first round needs no read
		// of its own.
		h := &History{}
		b = &pgx.Batch{}
		b.Queue(write, args...)
		queueHistory(b, t.Session, t.Position, h)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		c.History = h
		c.Turn.Status, c.Turn.Attempts = TurnRunning, t.Attempts+1
		// The session as read under its lock: the claim changed only its
		// lease and cursor, which Session does not show, and its turn runs.
		c.Session = l.Session
		c.Session.Running = true
		return nil
	})
	if err != nil {
		if pgCode(err) == "55P03" { // lock_not_available
			return Claim{}, fmt.Errorf("store: claim turn: %w", ErrSessionLocked)
		}
		return Claim{}, fmt.Errorf("store: claim turn: %w", err)
	}
	return c, nil
}

// ErrSessionLocked: a claim waited ClaimLockTimeout for the session's row
// and gave up. Another transaction holds it: most often a worker that is
// paused or slow inside a write, whose transaction Postgres ends after
// database.idle_in_transaction_timeout. Claim again a little later.
var ErrSessionLocked = errors.New("the session is locked by another transaction")

// ClaimLockTimeout bounds a claim's wait for the session's row: a claim
// never holds a pooled connection for long behind a stale worker's lock.
const ClaimLockTimeout = time.Second

var claimLockTimeoutMS = strconv.FormatInt(ClaimLockTimeout.Milliseconds(), 10)

// claimLock locks the session of the turn ($1) and reads its lease, its
// next output cursor, the transaction's time and the session itself (as
// sessionSelect reads it, but for Running). A lease is live while it has not
// run out and its worker still beats: a killed worker's lease is free as
// soon as its beat expires.
const claimLock = `SELECT s.lease_owner IS NOT NULL AND s.lease_expires_at > now()
		AND NOT EXISTS (SELECT 1 FROM planner_workers w WHERE w.id = s.lease_owner AND w.expires_at <= now()),
		s.lease_token, s.next_cursor, now(),
		s.id, p.key, s.title, s.created_by, s.created_at, s.updated_at, s.project_id, p.organization_id
	FROM planner_sessions s JOIN projects p ON p.id = s.project_id
	WHERE s.id = (SELECT session_id FROM planner_turns WHERE id = $1) FOR UPDATE OF s`

// claimWrite takes the lease of session $1 for owner $2 with token $3 for
// $4, moves its cursor by $5, and starts turn $6, marking it dispatched if
// nothing did: the fair dispatcher enqueues without a mark.
const claimWrite = `WITH s AS (UPDATE planner_sessions SET lease_owner = $2, lease_token = $3,
		lease_expires_at = now() + $4::interval, next_cursor = next_cursor + $5 WHERE id = $1)
	UPDATE planner_turns SET status = 'running', attempts = attempts + 1, enqueued_at = COALESCE(enqueued_at, now()),
		started_at = COALESCE(started_at, now()) WHERE id = $6`

// claimWriteStarted is claimWrite that also stores the turn's started
// output, at cursor $7 with data $8 and time $9.
const claimWriteStarted = `WITH s AS (UPDATE planner_sessions SET lease_owner = $2, lease_token = $3,
		lease_expires_at = now() + $4::interval, next_cursor = next_cursor + $5 WHERE id = $1),
	t AS (UPDATE planner_turns SET status = 'running', attempts = attempts + 1, enqueued_at = COALESCE(enqueued_at, now()),
		started_at = COALESCE(started_at, now()) WHERE id = $6)
	INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
	VALUES ($1, $7, $6, 'started', $8, $9)`

// claimLease is the session's lease as a claim reads it under the row
// lock, with the session's next output cursor, the transaction's time and
// the session.
type claimLease struct {
	Live    bool
	Token   int64
	Cursor  int64
	At      time.Time
	Session Session
}

func scanClaimLease(row pgx.Row) (claimLease, error) {
	var l claimLease
	s := &l.Session
	err := row.Scan(&l.Live, &l.Token, &l.Cursor, &l.At,
		&s.ID, &s.Project, &s.Title, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt, &s.ProjectID, &s.OrganizationID)
	return l, err
}

// fenced runs fn in a transaction that holds the session row, if and only
// if f still holds the lease.
func (db *DB) fenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	return db.txPipelined(ctx, func(tx pgx.Tx) error {
		if err := checkFence(ctx, tx, f); err != nil {
			return err
		}
		return fn(tx)
	})
}

// RenewLease extends the lease; ErrLeaseLost when another worker took it.
func (db *DB) RenewLease(ctx context.Context, f Fence, lease time.Duration) error {
	tag, err := db.pool.Exec(ctx, `UPDATE planner_sessions SET lease_expires_at = now() + $3::interval
		WHERE id = $1 AND lease_token = $2 AND lease_owner IS NOT NULL`, f.Session, f.Token, lease.String())
	if err != nil {
		return fmt.Errorf("store: renew lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	return nil
}

// HandBack expires the lease at once, so that another worker resumes the
// turn without waiting for it to run out (used on shutdown).
func (db *DB) HandBack(ctx context.Context, f Fence) error {
	_, err := db.pool.Exec(ctx, `UPDATE planner_sessions SET lease_expires_at = now()
		WHERE id = $1 AND lease_token = $2`, f.Session, f.Token)
	if err != nil {
		return fmt.Errorf("store: hand back lease: %w", err)
	}
	return nil
}

// SetAttemptTrace keeps the span context of the attempt holding f, so that
// an attempt resuming the turn links to it. A fence that lost the lease
// writes nothing.
func (db *DB) SetAttemptTrace(ctx context.Context, f Fence, trace map[string]string) error {
	_, err := db.pool.Exec(ctx, `UPDATE planner_turns t SET attempt_trace_context = NULLIF($3, '')::jsonb
		FROM planner_sessions s WHERE t.id = $1 AND s.id = t.session_id AND s.lease_token = $2`,
		f.Turn, f.Token, traceJSON(trace))
	if err != nil {
		return fmt.Errorf("store: set attempt trace: %w", err)
	}
	return nil
}

// traceJSON is a trace context as a jsonb parameter; "" (NULL) for none.
func traceJSON(trace map[string]string) string {
	if len(trace) == 0 {
		return ""
	}
	b, err := json.Marshal(trace)
	if err != nil {
		return ""
	}
	return string(b)
}
