package api

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// MaxTurnWait bounds GET …/turns/{turn}?wait=.
const MaxTurnWait = time.Minute

// turnRecheck is how often a waiting request reads its turn again, beside
// the turn's done output that ends the wait at once: a safety net only.
const turnRecheck = 2 * time.Second

// parseTurnWait reads ?wait=: a Go duration (30s, 1m, 500ms) from 0 to
// MaxTurnWait; none is 0, an answer at once.
func parseTurnWait(c *fiber.Ctx) (time.Duration, error) {
	raw := c.Query("wait")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 || d > MaxTurnWait {
		return 0, store.Errorf(store.CodeInvalid, "wait: must be a duration from 0s to %s, such as 30s, got %q", MaxTurnWait, raw)
	}
	return d, nil
}

// getTurn answers GET /planner/sessions/:session/turns/:turn (tracker.read):
// the turn; with ?wait=30s, once it has ended, or after the wait with its
// state then (status queued or running). A client that keeps no socket
// learns the end of a turn so.
func (s *Server) getTurn(c *fiber.Ctx) error {
	wait, err := parseTurnWait(c)
	if err != nil {
		return err
	}
	ctx, who, session, turn := c.UserContext(), caller(c), c.Params("session"), c.Params("turn")
	t, cursor, err := s.db.SessionTurn(ctx, who, session, turn)
	if err != nil || t.Finished() || wait == 0 {
		if err != nil {
			return err
		}
		return c.JSON(t)
	}
	if s.hub == nil {
		return store.Errorf(store.CodeUnavailable, "wait: live outputs are not served by this api process")
	}
	t, err = s.waitTurn(ctx, who, t, cursor, wait)
	if err != nil {
		return err
	}
	return c.JSON(t)
}

// waitTurn waits up to wait for the open turn t to end, watching its
// session from cursor (read with it, so that its done cannot be missed),
// and returns it as it is then.
func (s *Server) waitTurn(ctx context.Context, who store.Caller, t store.Turn, cursor int64, wait time.Duration) (store.Turn, error) {
	reread := func() (store.Turn, error) {
		got, _, err := s.db.SessionTurn(ctx, who, t.Session, t.ID)
		return got, err
	}
	w, err := s.hub.Watch(ctx, who, t.Session, cursor)
	if err != nil {
		return store.Turn{}, err
	}
	defer w.Close()
	if got, err := reread(); err != nil || got.Finished() {
		return got, err // ended while the watch began
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	recheck := time.NewTicker(turnRecheck)
	defer recheck.Stop()
	for {
		select {
		case o, ok := <-w.Outputs():
			if !ok {
				return reread() // the watch ended (lagging, shutdown): the state now
			}
			if o.Type == store.OutputDone && o.Turn == t.ID {
				return reread()
			}
		case <-recheck.C:
			if got, err := reread(); err != nil || got.Finished() {
				return got, err
			}
		case <-deadline.C:
			return reread()
		case <-s.stopping:
			return reread()
		case <-ctx.Done():
			return store.Turn{}, ctx.Err()
		}
	}
}
