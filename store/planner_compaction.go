package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SaveCompaction stores on the session a summary of every turn before
// position beforeTurn (whose messages end at seq upTo), with its
// planner.compacted event and compacted output.
func (db *DB) SaveCompaction(ctx context.Context, f Fence, summary string, upTo, beforeTurn, estimatedTokens int64) ([]Output, error) {
	var outs []Output
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		var orgID, projectID string
		if err := tx.QueryRow(ctx, `UPDATE planner_sessions s SET summary = $2, summary_up_to = $3, summary_turn = $4,
			summary_tokens = $5, updated_at = now() FROM projects p WHERE s.id = $1 AND p.id = s.project_id
			RETURNING p.organization_id, p.id`, f.Session, summary, upTo, beforeTurn, estimatedTokens).Scan(&orgID, &projectID); err != nil {
			return err
		}
		if _, err := AppendEvent(ctx, tx, Event{OrganizationID: orgID, ProjectID: projectID, Type: "planner.compacted",
			EntityType: "planner_session", EntityID: f.Session, Actor: PlannerActor(f.Session, f.Human),
			Payload: MustJSON(map[string]any{"up_to": upTo, "estimated_tokens": estimatedTokens})}); err != nil {
			return err
		}
		var err error
		outs, err = appendOutputs(ctx, tx, f.Session, Output{Turn: f.Turn, Type: OutputCompacted, Seq: upTo})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: save compaction: %w", err)
	}
	return outs, nil
}
