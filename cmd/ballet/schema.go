package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/store"
)

// schemaRecheck is how often a process waiting for its schema looks again.
const schemaRecheck = time.Second

// schemaStore reads the schema version; the store (*store.DB) provides it.
type schemaStore interface {
	SchemaStatus(ctx context.Context) (store.Schema, error)
}

// schemaGate holds a process's start, after its listeners and before the
// worker, until the database has every migration this binary needs: a
// process started while the migration Job runs (or with database.migrate
// off on a database nobody migrated) serves /healthz, answers /readyz with
// 503 naming the versions, logs once that it waits, and starts its work as
// soon as the schema is current, instead of exiting into a restart backoff
// or failing a query a second. A database ahead of the binary does not hold
// it: migrations keep working for the previous release during a rollout.
type schemaGate struct {
	db    schemaStore
	log   *slog.Logger
	every time.Duration
}

func (rt *runtime) newSchemaGate() *schemaGate {
	return &schemaGate{db: rt.db, log: rt.log, every: schemaRecheck}
}

// Start returns once the schema is current, or with ctx's error when the
// process is stopped first.
func (g *schemaGate) Start(ctx context.Context) error {
	logged := ""
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		reason, msg, current := g.check(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case reason == "":
			if logged != "" {
				g.log.InfoContext(ctx, "schema: current; starting", slog.Int64("version", current))
			}
			return nil
		case reason != logged:
			// Once per reason, not once per look nor per migration applied
			// meanwhile.
			g.log.WarnContext(ctx, "schema: waiting: "+msg, slog.Int64("current", current),
				slog.Int64("expected", store.SchemaVersion()))
			logged = reason
		default:
			g.log.DebugContext(ctx, "schema: still waiting", slog.Int64("current", current))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// check returns why the process must wait ("" for not: "behind" or the
// error reading the schema), what to tell, and the database's version.
func (g *schemaGate) check(ctx context.Context) (reason, msg string, current int64) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := g.db.SchemaStatus(cctx)
	switch {
	case err != nil:
		return err.Error(), err.Error(), s.Current
	case s.Behind():
		return "behind", store.AsError(s.Err()).Message, s.Current
	}
	return "", "", s.Current
}

// Stop does nothing: the gate holds nothing once started.
func (g *schemaGate) Stop() {}
