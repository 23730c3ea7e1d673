package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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

// LoadHistory reads what the turn at position sees, in one round trip: the
// session's summary and cancelled turns, then the messages from the
// summary's turn on. The cancelled turns are among the open ones (a turn
// is open, queued or running, until it has finished_at), read through the
// index of open turns rather than all the session's turns. The second statement reads the summary's turn again:
// only the turn's own lease holder compacts the session, in a fenced write,
// so the two agree unless that lease is lost, when nothing the reader does
// with them can be written any more.
func (db *DB) LoadHistory(ctx context.Context, sessionID string, position int64) (History, error) {
	var h History
	b := &pgx.Batch{}
	queueHistory(b, sessionID, position, &h)
	if err := db.pool.SendBatch(ctx, b).Close(); err != nil {
		return History{}, fmt.Errorf("store: history: %w", err)
	}
	return h, nil
}

// queueHistory queues on b LoadHistory's two statements, read into h; a
// claim queues them after its write, so that a turn's first round reads
// its history in the claim's round trip.
func queueHistory(b *pgx.Batch, sessionID string, position int64, h *History) {
	b.Queue(`SELECT summary, summary_turn,
			ARRAY(SELECT id::text FROM planner_turns WHERE session_id = $1 AND finished_at IS NULL
				AND cancel_requested)
		FROM planner_sessions WHERE id = $1`, sessionID).QueryRow(func(row pgx.Row) error {
		var summary *string
		var summaryTurn *int64
		if err := row.Scan(&summary, &summaryTurn, &h.Cancelled); err != nil {
			return notFound(err, "session %q", sessionID)
		}
		if summary != nil {
			h.Summary, h.SummaryTurn = *summary, *summaryTurn
		}
		return nil
	})
	b.Queue(`SELECT `+messageColumns+`
		FROM planner_messages m JOIN planner_turns t ON t.id = m.turn_id
		WHERE m.session_id = $1 AND t.session_id = $1 AND t.position <= $2
		  AND t.position >= COALESCE((SELECT summary_turn FROM planner_sessions WHERE id = $1), 0)
		  AND NOT (t.status = 'cancelled' AND t.started_at IS NULL)
		ORDER BY t.position, m.seq`, sessionID, position).Query(func(rows pgx.Rows) (err error) {
		h.Messages, err = collect(rows, scanMessage)
		return err
	})
}
