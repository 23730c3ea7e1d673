package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// What a send does when a turn of its session is running or queued
// (SendRequest.Multitask); "" is MultitaskEnqueue.
const (
	// MultitaskEnqueue queues the new turn behind the open ones.
	MultitaskEnqueue = "enqueue"
	// MultitaskReject refuses the send (conflict) while a turn is open.
	MultitaskReject = "reject"
	// MultitaskInterrupt cancels the open turns (they end done
	// "cancelled") and runs the new turn next.
	MultitaskInterrupt = "interrupt"
)

// ValidMultitask reports whether m is a multitask strategy or "".
func ValidMultitask(m string) bool {
	return m == "" || m == MultitaskEnqueue || m == MultitaskReject || m == MultitaskInterrupt
}

// MaxClientTurnLen bounds a client turn id (an idempotency key).
const MaxClientTurnLen = 255

// CheckClientTurn refuses a client turn id that is not 1 to 255 printable
// ASCII characters (space to tilde).
func CheckClientTurn(turn string) error {
	const want = "turn: must be 1-255 printable ASCII characters"
	switch {
	case turn == "":
		return Errorf(CodeInvalid, "%s, got an empty string", want)
	case len(turn) > MaxClientTurnLen:
		return Errorf(CodeInvalid, "%s, got %d bytes", want, len(turn))
	}
	for i := 0; i < len(turn); i++ {
		if c := turn[i]; c < 0x20 || c > 0x7e {
			return Errorf(CodeInvalid, "%s, got byte 0x%02x at offset %d", want, c, i)
		}
	}
	return nil
}

// clientTurnKey is the stored form of a valid client turn id: a UUID in
// its canonical lower-case text, anything else as it is; and the turn's
// own id when the key can be one (a UUID), else "".
func clientTurnKey(turn string) (key, id string) {
	if looksLikeUUID(turn) {
		turn = strings.ToLower(turn)
		return turn, turn
	}
	return turn, ""
}

// refuseBusy is a reject send's check, under the session's lock: a
// conflict while a turn of the session is running or queued.
func refuseBusy(ctx context.Context, tx pgx.Tx, sessionID string) error {
	var open string
	err := tx.QueryRow(ctx, `SELECT id::text FROM planner_turns WHERE session_id = $1 AND finished_at IS NULL
		ORDER BY position LIMIT 1`, sessionID).Scan(&open)
	if err == pgx.ErrNoRows {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open turn: %w", err)
	}
	return Errorf(CodeConflict, "session %s has a turn running or queued (%s); multitask %q refuses to queue behind it",
		sessionID, open, MultitaskReject)
}
