package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store"
)

// oneRoundSteps are the store calls of a one-round turn, as the worker makes
// them: send, claim, history, and the finish with the model's answer.
func oneRoundSteps(db *store.DB, caller store.Caller, session string, _ int) []turnStep {
	var res store.SendResult
	var claim store.Claim
	return append(sendAndClaim(db, caller, session, &res, &claim), []turnStep{
		{"history", func(ctx context.Context) error {
			_, err := db.LoadHistory(ctx, session, claim.Turn.Position)
			return err
		}},
		{"finish", func(ctx context.Context) error { return finishDone(ctx, db, claim.Fence) }},
	}...)
}

// turnCostMigrations are the migrations that cut the Postgres CPU of a turn;
// their Down sections put the schema back as it was before each.
var turnCostMigrations = []string{
	"00101_planner_outputs_turn_idx.sql",
	"00102_planner_counter_triggers.sql",
	"00103_planner_sessions_hot.sql",
}

// BenchmarkTurnCost pairs turns on a database with the Down sections of
// turnCostMigrations run (all of them, then each one's alone) against turns
// on one as migrated, for one-round turns and for turns that call a tool
// (pairedSteps): the gain of each migration in Postgres CPU per turn, beside
// a control pair with nothing restored.
func BenchmarkTurnCost(b *testing.B) {
	kinds := []struct {
		name  string
		steps func(*store.DB, store.Caller, string, int) []turnStep
	}{{"one-round", oneRoundSteps}, {"tool", turnSteps}}
	pairs := [][]string{turnCostMigrations}
	if len(turnCostMigrations) > 1 {
		for _, m := range turnCostMigrations {
			pairs = append(pairs, []string{m})
		}
	}
	for _, k := range kinds {
		// The control pairs two databases as migrated: its ratio is the
		// noise of the pairing itself.
		b.Run(k.name+"/control", func(b *testing.B) { pairedSteps(b, k.steps, nil) })
		for _, restore := range pairs {
			name := k.name + "/all"
			if len(restore) == 1 && len(pairs) > 1 {
				name = k.name + "/" + strings.TrimSuffix(restore[0], ".sql")
			}
			b.Run(name, func(b *testing.B) { pairedSteps(b, k.steps, restore) })
		}
	}
}

// BenchmarkOneRoundTurn runs one-round turns (oneRoundSteps) as migrated on
// one connection and reports the Postgres backend's CPU per turn, the test
// process's, and the statements and round trips: the figure to compare
// between two builds, run alternately.
func BenchmarkOneRoundTurn(b *testing.B) {
	newStepsBench(b, oneRoundSteps).loop(b)
}
