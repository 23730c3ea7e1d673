package store

import (
	"context"
	"fmt"
)

// History is what the model sees of a session for one turn: the stored
// summary of the turns before SummaryTurn, then every message of the turns
// from SummaryTurn up to the running one, in conversation order (by turn,
// then seq: a message sent while a turn ran has a lower seq than that turn's
// later answers, but comes after them). Turns cancelled before they started
// are left out: the human withdrew them.
type History struct {
	Summary     string
	SummaryTurn int64
	Messages    []Message
	// Cancelled lists the turns among them whose cancel was asked for.
	Cancelled []string
}

// CancelRequested reports whether a cancel of the turn was asked for when
// the history was read.
func (h History) CancelRequested(turn string) bool {
	for _, t := range h.Cancelled {
		if t == turn {
			return true
		}
	}
	return false
}

// LoadHistory reads what the turn at position sees.
func (db *DB) LoadHistory(ctx context.Context, sessionID string, position int64) (History, error) {
	var h History
	var summary *string
	var summaryTurn *int64
	if err := db.pool.QueryRow(ctx, `SELECT summary, summary_turn,
			ARRAY(SELECT id::text FROM planner_turns WHERE session_id = $1 AND cancel_requested AND finished_at IS NULL)
		FROM planner_sessions WHERE id = $1`,
		sessionID).Scan(&summary, &summaryTurn, &h.Cancelled); err != nil {
		return History{}, fmt.Errorf("store: history: %w", notFound(err, "session %q", sessionID))
	}
	if summary != nil {
		h.Summary, h.SummaryTurn = *summary, *summaryTurn
	}
	rows, err := db.pool.Query(ctx, `SELECT `+messageColumns+`
		FROM planner_messages m JOIN planner_turns t ON t.id = m.turn_id
		WHERE m.session_id = $1 AND t.session_id = $1 AND t.position >= $2 AND t.position <= $3
		  AND NOT (t.status = 'cancelled' AND t.started_at IS NULL)
		ORDER BY t.position, m.seq`, sessionID, h.SummaryTurn, position)
	if err != nil {
		return History{}, fmt.Errorf("store: history: %w", err)
	}
	h.Messages, err = collect(rows, scanMessage)
	if err != nil {
		return History{}, fmt.Errorf("store: history: %w", err)
	}
	return h, nil
}
