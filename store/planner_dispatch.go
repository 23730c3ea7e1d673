package store

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fair scheduling (migrations 00106, 00109). A session's next turn is ready
// from the transaction that makes it the next (send, finish, cancel); the
// dispatcher, one per deployment, enqueues the tasks of ready turns as
// worker slots free up, fairly across organizations, projects and humans,
// and keeps in memory which it dispatched: it writes nothing to Postgres
// per turn. The worker's claim marks a turn dispatched (enqueued_at) if
// nothing did before; until then the dispatcher itself sees to it that the
// task reaches a worker (DispatchConn.Unclaimed). With direct dispatch
// (scheduler.mode = "fifo") a turn is marked dispatched in the statement
// that makes it ready.

// SetDirectDispatch makes a turn dispatched in the statement that makes it
// ready (scheduler.mode = "fifo"): its task is enqueued right after commit,
// first come first served, with no dispatcher. Set it before use; every
// process of a deployment must agree.
func (db *DB) SetDirectDispatch(on bool) { db.direct = on }

// DispatchChannel is the Postgres channel the dispatcher listens on: a
// trigger on planner_turns notifies every turn that becomes ready and every
// ready or dispatched turn that ends, at commit; a change of weights or
// caps notifies too.
const DispatchChannel = "ballet_dispatch"

// DispatchListenerName is the application_name of the dispatcher's
// connections, for finding them in pg_stat_activity.
const DispatchListenerName = "ballet-dispatch"

// dispatchLockKey is the advisory lock the leading dispatcher holds on its
// connection for as long as it leads; a dispatcher killed with its process
// loses its connection and with it the lock, and a standby takes over.
const dispatchLockKey int64 = 0x62616c6c6574_03 // "ballet", 3

// Turn priorities (planner_turns.priority): inside one organization's
// share, interactive turns go first.
const (
	PriorityInteractive = "interactive"
	PriorityBatch       = "batch"
)

// ValidPriority reports whether p names a priority; "" is interactive.
func ValidPriority(p string) bool {
	return p == "" || p == PriorityInteractive || p == PriorityBatch
}

// DispatchTurn is a turn as the dispatcher schedules it: ready, or
// dispatched and not ended (in flight, holding a worker slot or about to).
type DispatchTurn struct {
	ID           string
	Session      string
	Organization string
	Project      string
	Human        string
	Batch        bool
	// Dispatched is true for a turn marked dispatched: by a worker's
	// claim, or by direct dispatch. A turn the dispatcher enqueued and no
	// worker claimed yet reads as ready.
	Dispatched bool
	ReadyAt    time.Time
	// RequestID is the api request that sent the turn, for its task.
	RequestID string
	// TraceContext is the trace of the send, for its task.
	TraceContext map[string]string
}

// UnclaimedTurn is a turn the dispatcher enqueued that no worker claimed.
type UnclaimedTurn struct {
	Session      string
	Turn         string
	RequestID    string
	TraceContext map[string]string
}

// SchedulingSettings are one organization's or project's weight and caps as
// stored; a nil cap is the [scheduler] default, 0 is no cap.
type SchedulingSettings struct {
	Weight                  int  `json:"weight"`
	MaxRunningTurns         *int `json:"max_running_turns"`
	MaxRunningTurnsPerHuman *int `json:"max_running_turns_per_human"`
	// MaxQueuedTurns is an organization's cap on queued turns (nil:
	// server.max_queued_turns_per_organization); projects have none here.
	MaxQueuedTurns *int `json:"max_queued_turns,omitempty"`
}

// DispatchConn is a connection of the dispatcher's own, outside the pool:
// it takes the leader's lock and, while it holds it, reads the backlog and
// dispatches. A lost connection loses the lock with it, so a dispatcher
// that lost leadership cannot dispatch on it.
type DispatchConn struct {
	conn *pgx.Conn
}

// OpenDispatchConn opens a dispatcher connection; it only reads.
func (db *DB) OpenDispatchConn(ctx context.Context) (*DispatchConn, error) {
	conn, err := db.connectOwn(ctx, DispatchListenerName, nil)
	if err != nil {
		return nil, fmt.Errorf("store: dispatch connection: %w", err)
	}
	return &DispatchConn{conn: conn}, nil
}

// ListenDispatch opens a connection of its own listening on
// DispatchChannel; the caller waits on it and closes it.
func (db *DB) ListenDispatch(ctx context.Context) (*pgx.Conn, error) {
	conn, err := db.connectOwn(ctx, DispatchListenerName, nil)
	if err != nil {
		return nil, fmt.Errorf("store: listen for dispatch: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{DispatchChannel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("store: listen for dispatch: %w", err)
	}
	return conn, nil
}

// connectOwn opens a connection outside the pool, named name, with the
// run-time parameters params besides the pool's.
func (db *DB) connectOwn(ctx context.Context, name string, params map[string]string) (*pgx.Conn, error) {
	cfg := db.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	maps.Copy(cfg.RuntimeParams, params)
	cfg.RuntimeParams["application_name"] = name
	return pgx.ConnectConfig(ctx, cfg)
}

// Close closes the connection, which releases the lock if it was held.
func (c *DispatchConn) Close() { _ = c.conn.Close(context.Background()) }

// TryLead takes the leader's lock without waiting: true when this
// connection holds it now.
func (c *DispatchConn) TryLead(ctx context.Context) (bool, error) {
	var ok bool
	if err := c.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, dispatchLockKey).Scan(&ok); err != nil {
		return false, fmt.Errorf("store: dispatch lock: %w", err)
	}
	return ok, nil
}

// dispatchSnapshot reads every ready turn and every dispatched one that has
// not ended, oldest ready first.
const dispatchSnapshot = `SELECT t.id, t.session_id, p.organization_id, t.project_id, t.author,
		t.priority = 'batch', t.enqueued_at IS NOT NULL, t.ready_at, COALESCE(t.request_id, ''),
		t.trace_context
	FROM planner_turns t JOIN projects p ON p.id = t.project_id
	WHERE t.finished_at IS NULL AND t.ready_at IS NOT NULL
	ORDER BY t.ready_at, t.position, t.id`

// Snapshot reads the whole backlog and what is in flight.
func (c *DispatchConn) Snapshot(ctx context.Context) ([]DispatchTurn, error) {
	rows, err := c.conn.Query(ctx, dispatchSnapshot)
	if err != nil {
		return nil, fmt.Errorf("store: dispatch snapshot: %w", err)
	}
	turns, err := collect(rows, scanDispatchTurn)
	if err != nil {
		return nil, fmt.Errorf("store: dispatch snapshot: %w", err)
	}
	return turns, nil
}

func scanDispatchTurn(row pgx.Row) (DispatchTurn, error) {
	var t DispatchTurn
	err := row.Scan(&t.ID, &t.Session, &t.Organization, &t.Project, &t.Human, &t.Batch, &t.Dispatched, &t.ReadyAt, &t.RequestID, &t.TraceContext)
	return t, err
}

// Slots is the pool's capacity: the slots of the workers whose beat holds.
func (c *DispatchConn) Slots(ctx context.Context) (int, error) {
	var n int
	if err := c.conn.QueryRow(ctx, `SELECT COALESCE(sum(slots), 0)::int FROM planner_workers
		WHERE expires_at > now()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: worker slots: %w", err)
	}
	return n, nil
}

// Unclaimed returns those of the turns (ids) that are open and still
// queued, unclaimed by any worker: their tasks may not have reached the
// queue, or a worker that took one died before claiming the turn.
func (c *DispatchConn) Unclaimed(ctx context.Context, ids []string) ([]UnclaimedTurn, error) {
	rows, err := c.conn.Query(ctx, `SELECT session_id, id, COALESCE(request_id, ''), trace_context FROM planner_turns
		WHERE id = ANY ($1::uuid[]) AND finished_at IS NULL AND status = 'queued'`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: unclaimed turns: %w", err)
	}
	out, err := collect(rows, scanUnclaimedTurn)
	if err != nil {
		return nil, fmt.Errorf("store: unclaimed turns: %w", err)
	}
	return out, nil
}

// scanUnclaimedTurn reads a row of Unclaimed.
func scanUnclaimedTurn(row pgx.Row) (UnclaimedTurn, error) {
	var u UnclaimedTurn
	err := row.Scan(&u.Session, &u.Turn, &u.RequestID, &u.TraceContext)
	return u, err
}

// ScopeSettings are an organization's or project's key with its weight and
// caps, as the dispatcher reads them.
type ScopeSettings struct {
	Key string
	SchedulingSettings
}

// Settings reads the keys, weights and caps of the organizations and
// projects named.
func (c *DispatchConn) Settings(ctx context.Context, orgs, projects []string) (map[string]ScopeSettings, error) {
	out := make(map[string]ScopeSettings, len(orgs)+len(projects))
	rows, err := c.conn.Query(ctx, `
		SELECT id::text, key, scheduling_weight, max_running_turns, max_running_turns_per_human
		FROM organizations WHERE id = ANY ($1::uuid[])
		UNION ALL
		SELECT id::text, key, scheduling_weight, max_running_turns, max_running_turns_per_human
		FROM projects WHERE id = ANY ($2::uuid[])`, orgs, projects)
	if err != nil {
		return nil, fmt.Errorf("store: scheduling settings: %w", err)
	}
	all, err := collect(rows, scanScopeSettings)
	if err != nil {
		return nil, fmt.Errorf("store: scheduling settings: %w", err)
	}
	for _, s := range all {
		out[s.id] = s.ScopeSettings
	}
	return out, nil
}

// scopeSettingsRow is an organization's or project's id with its settings.
type scopeSettingsRow struct {
	id string
	ScopeSettings
}

func scanScopeSettings(row pgx.Row) (scopeSettingsRow, error) {
	var s scopeSettingsRow
	err := row.Scan(&s.id, &s.Key, &s.Weight, &s.MaxRunningTurns, &s.MaxRunningTurnsPerHuman)
	return s, err
}

// notifySettingsChanged tells the dispatcher, at commit, to read weights
// and caps again.
const notifySettingsChanged = `SELECT pg_notify('` + DispatchChannel + `', '{"k":"w"}')`

// DispatchNote is one notification on DispatchChannel.
type DispatchNote struct {
	// Kind is "r" (a turn is ready), "e" (a ready or dispatched turn ended
	// or went) or "w" (weights or caps changed).
	Kind         string `json:"k"`
	Turn         string `json:"t"`
	Session      string `json:"s"`
	Organization string `json:"o"`
	Project      string `json:"p"`
	Human        string `json:"h"`
	Batch        bool   `json:"b"`
	// Dispatched is true for a turn made ready and dispatched at once
	// (direct dispatch).
	Dispatched bool `json:"d"`
	// RequestID is the api request that sent the turn.
	RequestID string `json:"q"`
	// TraceContext is the trace of the send; nil without one.
	TraceContext map[string]string `json:"x"`
}
