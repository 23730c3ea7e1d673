package store

import (
	"context"
	"fmt"
	"strings"
)

// SessionTurn returns a turn of the session (tracker.read) and the
// session's last output cursor as of that read: a watch from that cursor
// sees every output the turn stores after it, its done among them.
func (db *DB) SessionTurn(ctx context.Context, caller Caller, sessionID, turnID string) (Turn, int64, error) {
	s, err := db.authorizedSession(ctx, caller, sessionID, PermTrackerRead)
	if err != nil {
		return Turn{}, 0, err
	}
	turnID = strings.ToLower(turnID)
	if !looksLikeUUID(turnID) {
		return Turn{}, 0, Errorf(CodeNotFound, "turn %q not found in session %s", turnID, s.ID)
	}
	var cursor int64
	t, err := scanTurn(db.pool.QueryRow(ctx, `SELECT `+turnColumns+`,
		(SELECT next_cursor - 1 FROM planner_sessions WHERE id = $2)
		FROM planner_turns WHERE id = $1 AND session_id = $2`, turnID, s.ID), &cursor)
	if err != nil {
		return Turn{}, 0, fmt.Errorf("store: session turn: %w", notFound(err, "turn %q in session %s", turnID, s.ID))
	}
	return t, cursor, nil
}

// Finished reports whether the turn has ended (done, cancelled or failed).
func (t Turn) Finished() bool { return t.FinishedAt != nil }
