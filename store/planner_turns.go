package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TurnStatus is where a turn is in its life (planner_turns.status).
type TurnStatus string

// Turn statuses: queued until a worker claims it, running while one holds
// the session's lease for it, then exactly one of done, cancelled, failed.
const (
	TurnQueued    TurnStatus = "queued"
	TurnRunning   TurnStatus = "running"
	TurnDone      TurnStatus = "done"
	TurnCancelled TurnStatus = "cancelled"
	TurnFailed    TurnStatus = "failed"
)

// Output types of SPEC §8; all but OutputText are stored with a cursor.
const (
	OutputQueued     = "queued"
	OutputStarted    = "started"
	OutputText       = "text"
	OutputToolCall   = "tool_call"
	OutputToolResult = "tool_result"
	OutputMessage    = "message"
	OutputCompacted  = "compacted"
	OutputError      = "error"
	OutputDone       = "done"
)

// Reasons a turn ends with, beside the model's own stop reasons.
const (
	ReasonEndTurn   = "end_turn"
	ReasonMaxRounds = "max_rounds"
	ReasonCancelled = "cancelled"
	ReasonError     = "error"
)

// CodeExhausted is a refusal because a limit is full (HTTP 429).
const CodeExhausted Code = "resource_exhausted"

// Output is one planner.output (SPEC §8): what a turn tells its watchers.
type Output struct {
	Session   string          `json:"session"`
	Turn      string          `json:"turn"`
	Cursor    int64           `json:"cursor,omitempty"`
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Seq       int64           `json:"seq,omitempty"`
	Position  *int64          `json:"position,omitempty"`
	// Role and Content are the stored message of a message output, so that
	// a client can show it without a second request. They are not kept in
	// the output's row: a read joins them from the message.
	Role    string  `json:"role,omitempty"`
	Content []Block `json:"content,omitempty"`
	// CreatedAt is when a stored output was committed; text deltas have none.
	CreatedAt time.Time `json:"created_at,omitzero"`
	// A text output's place in its round's text: Attempt grows whenever the
	// round's text starts over (another worker took the turn over, or the
	// model was called again); the text is the bytes that end at TextEnd of
	// the round that follows the stored output with cursor TextAfter. A
	// text output without TextEnd has no known place (the running text was
	// lost with Redis's data): it follows what came before it.
	Attempt   int64 `json:"attempt,omitempty"`
	TextAfter int64 `json:"text_after,omitempty"`
	TextEnd   int64 `json:"text_end,omitempty"`
}

// Turn is one human message's run through the planner.
type Turn struct {
	ID              string     `json:"id"`
	Session         string     `json:"session"`
	ProjectID       string     `json:"-"`
	Position        int64      `json:"position"`
	MessageSeq      int64      `json:"message_seq"`
	Author          string     `json:"author"`
	Status          TurnStatus `json:"status"`
	CancelRequested bool       `json:"cancel_requested"`
	DoneReason      string     `json:"done_reason,omitempty"`
	Rounds          int        `json:"rounds"`
	Attempts        int        `json:"attempts"`
	CreatedAt       time.Time  `json:"created_at"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
}

// turnColumns are what scanTurn reads from planner_turns.
const turnColumns = `id, session_id, project_id, position, message_seq, author, status, cancel_requested,
	COALESCE(done_reason, ''), rounds, attempts, created_at, started_at, finished_at`

// scanTurn reads turnColumns and, into extra, any columns after them.
func scanTurn(row pgx.Row, extra ...any) (Turn, error) {
	var t Turn
	err := row.Scan(append([]any{&t.ID, &t.Session, &t.ProjectID, &t.Position, &t.MessageSeq, &t.Author, &t.Status,
		&t.CancelRequested, &t.DoneReason, &t.Rounds, &t.Attempts, &t.CreatedAt, &t.StartedAt, &t.FinishedAt},
		extra...)...)
	return t, err
}

// TurnByID loads a turn without checking permissions.
func (db *DB) TurnByID(ctx context.Context, id string) (Turn, error) {
	if !looksLikeUUID(id) {
		return Turn{}, Errorf(CodeNotFound, "turn %q not found", id)
	}
	t, err := scanTurn(db.pool.QueryRow(ctx, `SELECT `+turnColumns+` FROM planner_turns WHERE id = $1`, id))
	if err != nil {
		return Turn{}, fmt.Errorf("store: turn: %w", notFound(err, "turn %q", id))
	}
	return t, nil
}

// QueueLimits cap queued turns; a send beyond them is refused.
type QueueLimits struct {
	Total      int
	PerProject int
	// PerOrganization caps one organization's queued turns unless its
	// organizations.max_queued_turns is set (0 there: no cap); see
	// planner_queue.go for the organization's share of Total.
	PerOrganization int
}

// SendResult is what a send tells its caller.
type SendResult struct {
	Seq      int64  `json:"seq"`
	Turn     string `json:"turn"`
	Position int64  `json:"position"`
	// Queued is the stored queued output, to publish after commit.
	Queued Output `json:"-"`
	// Head is true when no turn of the session is ahead and it was
	// dispatched at once (direct dispatch): enqueue it now.
	Head bool `json:"-"`
	// Existing is true when turnID named a turn already sent.
	Existing bool `json:"-"`
	// Interrupted is what a send with MultitaskInterrupt cancelled: its
	// outputs to publish, tasks to delete and workers to nudge.
	Interrupted CancelResult `json:"-"`
}

// MaxMessageRunes bounds a human message (SPEC §8).
const MaxMessageRunes = 100000

// SendMessage stores a human message and its turn in one transaction
// (tracker.write; humans only). A turnID already sent to this session
// returns that turn again, so a retried send is not a second turn. Position
// is the number of the session's turns ahead of it.
//
// The transaction writes the session row once: one UPDATE takes its lock
// and allocates the message seq, the turn's position and the queued
// output's cursor; the limit check and the inserts follow in one pipelined
// batch. Queue limits read the counters of planner_queue.go; with none set,
// nothing is counted.
func (db *DB) SendMessage(ctx context.Context, caller Caller, sessionID, text, turnID string, lim QueueLimits) (SendResult, error) {
	return db.Send(ctx, caller, SendRequest{Session: sessionID, Text: text, Turn: turnID}, lim)
}

// SendRequest is one human message to send: the session, the text, an
// optional client turn id (an idempotency key: CheckClientTurn), the
// turn's priority ("" is interactive) and what to do while a turn of the
// session is open (Multitask; "" enqueues). RequestID is the api request
// that sent it, for the turn's task; TraceContext the trace of the send
// (W3C traceparent and tracestate), for the spans of the processes that
// enqueue and run the turn.
type SendRequest struct {
	Session      string
	Text         string
	Turn         string
	Priority     string
	Multitask    string
	RequestID    string
	TraceContext map[string]string
	// Webhook is a URL to POST once the turn ends ("" for none), checked
	// by the caller (webhooks.Policy): the store keeps it with the turn.
	Webhook string
}

// Send is SendMessage with a priority and a request id.
func (db *DB) Send(ctx context.Context, caller Caller, req SendRequest, lim QueueLimits) (SendResult, error) {
	sessionID, text, turnID := req.Session, req.Text, req.Turn
	if !ValidPriority(req.Priority) {
		return SendResult{}, Errorf(CodeInvalid, "priority: must be %q or %q, got %q", PriorityInteractive, PriorityBatch, req.Priority)
	}
	if req.Priority == "" {
		req.Priority = PriorityInteractive
	}
	if caller.Actor.Kind != ActorHuman {
		return SendResult{}, Errorf(CodeForbidden, "only a human may send planner messages")
	}
	if strings.TrimSpace(text) == "" {
		return SendResult{}, Errorf(CodeInvalid, "text: must not be blank")
	}
	if n := utf8.RuneCountInString(text); n > MaxMessageRunes {
		return SendResult{}, Errorf(CodeInvalid, "text: at most %d characters, got %d", MaxMessageRunes, n)
	}
	if !ValidMultitask(req.Multitask) {
		return SendResult{}, Errorf(CodeInvalid, "multitask: must be %q, %q or %q, got %q",
			MultitaskEnqueue, MultitaskReject, MultitaskInterrupt, req.Multitask)
	}
	if turnID == "" {
		turnID = uuid.NewString()
	} else if err := CheckClientTurn(turnID); err != nil {
		return SendResult{}, err
	}
	if !looksLikeUUID(sessionID) {
		return SendResult{}, Errorf(CodeNotFound, "session %q not found", sessionID)
	}
	for attempt := 1; ; attempt++ {
		res, err := db.send(ctx, caller, req, turnID, lim)
		if IsCode(err, CodeNotFound) || IsCode(err, CodeForbidden) {
			return SendResult{}, err
		}
		// Another send took the turn id at the same moment (a retry in this
		// session, or the same client id in another): the next attempt sees
		// that turn committed.
		if err != nil && attempt < maxSendAttempts && (isUniqueViolation(err, "planner_turns_pkey") ||
			isUniqueViolation(err, "planner_turns_client_turn_idx")) {
			continue
		}
		if err != nil {
			return SendResult{}, fmt.Errorf("store: send message: %w", err)
		}
		return res, nil
	}
}

// maxSendAttempts bounds the transactions of one send that lost a race for
// its turn id.
const maxSendAttempts = 3

// errAlreadySent rolls back a send whose turn was sent before.
var errAlreadySent = errors.New("turn already sent")

// activeNow is what a send stores in last_active_at: when a human last
// sent a message, to the second. It only orders the sessions list, and it
// is the one key of planner_sessions_project_idx a write moves, so only a
// send moves it (a worker's writes are HOT updates), and two sends of a
// session in the same second store the same value (the second one can be
// HOT too).
const activeNow = `date_trunc('second', now())`

// sendSession locks the session row and allocates, in one write, the seq of
// the message, the position of the turn and the cursor of its queued
// output; it also returns what the permission check and the writes need of
// the session and its project, finds a turn this session already sent with
// the client's turn id ($2), and whether another turn has the id $3 (the
// client's id when it is a UUID). Those two are read as of the statement's
// start: a send racing for the same id is caught by the unique indexes
// instead, and retried. The project row is read, not locked.
const sendSession = `UPDATE planner_sessions s SET next_seq = s.next_seq + 1, next_turn = s.next_turn + 1,
	next_cursor = s.next_cursor + 1, last_active_at = ` + activeNow + `, updated_at = now()
	FROM projects p
	WHERE s.id = $1 AND p.id = s.project_id
	RETURNING s.next_seq - 1, s.next_turn - 1, s.next_cursor - 1, now(),
		(SELECT t.id::text FROM planner_turns t WHERE t.session_id = $1 AND t.client_turn_id = $2),
		EXISTS (SELECT 1 FROM planner_turns t WHERE t.id = $3),
		s.project_id, p.key, p.organization_id`

// sendAllocation is what sendSession returns.
type sendAllocation struct {
	seq, position, cursor int64
	at                    time.Time
	// sent is the turn this session already sent with the client's id.
	sent *string
	// taken is true when another turn has the client's id as its own.
	taken bool
	// session has the ids and the project key of the session.
	session Session
}

func scanSendAllocation(row pgx.Row, sessionID string) (sendAllocation, error) {
	a := sendAllocation{session: Session{ID: sessionID}}
	err := row.Scan(&a.seq, &a.position, &a.cursor, &a.at, &a.sent, &a.taken,
		&a.session.ProjectID, &a.session.Project, &a.session.OrganizationID)
	return a, err
}

// sendTurn inserts the turn, its message and its queued output in one
// statement, counting the session's open turns ahead of it under the session
// lock: all of them, as every open turn has a lower position than the one
// inserted. That count is the queued output's position, and the statement's
// result. A turn with nothing ahead is ready ($12: and dispatched, to be
// enqueued right after commit; if that enqueue is lost, the sweeper finds
// it by its age); $13 is its priority, $14 the request that sent it, $15
// its trace context (JSON text, or "" for none), $16 its webhook URL ("" for
// none).
const sendTurn = `WITH ahead AS (SELECT count(*) AS n FROM planner_turns
		WHERE session_id = $2 AND finished_at IS NULL),
	` + fairAhead + `,
	turn AS (INSERT INTO planner_turns (id, session_id, project_id, position, message_seq, author, ready_at, enqueued_at,
			client_turn_id, priority, request_id, trace_context, webhook_url)
		SELECT $1, $2, $3, $4, $5, $6, CASE WHEN ahead.n = 0 THEN now() END, CASE WHEN ahead.n = 0 AND $12 THEN now() END,
			$7, $13, NULLIF($14, ''), NULLIF($15, '')::jsonb, NULLIF($16, '') FROM ahead),
	message AS (INSERT INTO planner_messages (session_id, seq, role, content, author, turn_id)
		VALUES ($2, $5, 'user', $8, $6, $1)),
	fairn AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM planner_turns t
			WHERE t.finished_at IS NULL AND t.ready_at IS NOT NULL AND t.enqueued_at IS NULL AND NOT $12 AND t.session_id <> $2)
		THEN (SELECT n FROM fair) ELSE 0 END AS n)
	INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at)
	SELECT $2, $9, $1, 'queued', $10::jsonb || jsonb_build_object('position', ahead.n + fairn.n), $11 FROM ahead, fairn
	RETURNING (SELECT n FROM ahead), (SELECT n FROM fairn)`

// fairAhead estimates, as the CTE fair, how many turns held back by the
// scheduler, other than session $2's own, start before a turn of project
// $3, human $6 and priority $13 made ready now, under the current shares
// (none with direct dispatch, $12; and sendTurn reads it only when some
// turn is held back): with r the turn's rank among its human's held-back turns in the
// project (interactive ones only, for an interactive turn), each other
// human of the project starts up to r of theirs first; with that rank
// r' in the project, each other project of the organization starts up to
// r' × its weight ÷ the project's weight; and so on for the other
// organizations, each capped at what it has waiting.
const fairAhead = `g AS (SELECT p.organization_id AS org, t.project_id AS project, t.author AS human,
			count(*) AS n_all, count(*) FILTER (WHERE t.priority = 'interactive') AS n_int
		FROM planner_turns t JOIN projects p ON p.id = t.project_id
		WHERE t.finished_at IS NULL AND t.ready_at IS NOT NULL AND t.enqueued_at IS NULL AND NOT $12
			AND t.session_id <> $2
		GROUP BY 1, 2, 3),
	me AS (SELECT p.organization_id AS org, p.scheduling_weight AS pw, o.scheduling_weight AS ow
		FROM projects p JOIN organizations o ON o.id = p.organization_id WHERE p.id = $3),
	mine AS (SELECT g.*, CASE WHEN $13 = 'batch' THEN g.n_all ELSE g.n_int END AS n
		FROM g, me WHERE g.org = me.org),
	r1 AS (SELECT 1 + COALESCE((SELECT sum(n) FROM mine WHERE project = $3 AND human = $6), 0) AS r),
	r2 AS (SELECT r1.r + COALESCE((SELECT sum(least(mine.n, r1.r)) FROM mine
		WHERE mine.project = $3 AND mine.human <> $6), 0) AS r FROM r1),
	r3 AS (SELECT r2.r + COALESCE((SELECT sum(least(x.n, ceil(r2.r * x.w::numeric / me.pw)))
		FROM (SELECT mine.project, sum(mine.n) AS n, max(p.scheduling_weight) AS w
			FROM mine JOIN projects p ON p.id = mine.project WHERE mine.project <> $3 GROUP BY 1) x), 0) AS r FROM r2, me),
	r4 AS (SELECT r3.r + COALESCE((SELECT sum(least(x.n, ceil(r3.r * x.w::numeric / me.ow)))
		FROM (SELECT g.org, sum(g.n_all) AS n, max(o.scheduling_weight) AS w
			FROM g JOIN organizations o ON o.id = g.org WHERE g.org <> me.org GROUP BY 1) x), 0) AS r FROM r3, me),
	fair AS (SELECT (r4.r - 1)::bigint AS n FROM r4)`

// send is one transaction of SendMessage. Its first statement takes the
// session's row lock and reads what the permission check needs; a caller
// who may not send rolls back before anything is written.
func (db *DB) send(ctx context.Context, caller Caller, req SendRequest, turnID string, lim QueueLimits) (SendResult, error) {
	sessionID, text := req.Session, req.Text
	key, own := clientTurnKey(turnID)
	var res SendResult
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		// An interrupt cancels first, so that the cancelled turns' done
		// outputs come before the new turn's queued one; a caller who may
		// not send rolls it back with the rest.
		var interrupted CancelResult
		if req.Multitask == MultitaskInterrupt {
			var err error
			if interrupted, err = db.cancelOpen(ctx, tx, sessionID, ""); err != nil {
				return err
			}
		}
		a, err := scanSendAllocation(tx.QueryRow(ctx, sendSession, sessionID, key, nullString(own)), sessionID)
		if err != nil {
			return notFound(err, "session %q", sessionID)
		}
		s := a.session
		if err := caller.Authorize(PermTrackerWrite, s.OrganizationID, s.ProjectID); err != nil {
			if IsCode(err, CodeNotFound) {
				return Errorf(CodeNotFound, "session %q not found", sessionID)
			}
			return err
		}
		if a.sent != nil {
			res = SendResult{Turn: *a.sent, Existing: true}
			if err := tx.QueryRow(ctx, `SELECT t.message_seq, (SELECT count(*) FROM planner_turns o
				WHERE o.session_id = t.session_id AND o.position < t.position AND o.finished_at IS NULL)
				FROM planner_turns t WHERE t.id = $1`, *a.sent).Scan(&res.Seq, &res.Position); err != nil {
				return err
			}
			return errAlreadySent
		}
		if req.Multitask == MultitaskReject {
			if err := refuseBusy(ctx, tx, s.ID); err != nil {
				return err
			}
		}
		// The turn takes the client's id when it is a UUID no other turn has.
		id := own
		if id == "" || a.taken {
			id = uuid.NewString()
		}
		seq, position, cursor, at := a.seq, a.position, a.cursor, a.at
		author := caller.Principal.Subject
		b := &pgx.Batch{}
		var counts queueCounts
		if lim.limited() {
			queueQueuedCounts(b, s, &counts)
		}
		var ahead, fair int64
		out := Output{Session: s.ID, Turn: id, Cursor: cursor, Type: OutputQueued, Seq: seq}
		b.Queue(sendTurn, id, s.ID, s.ProjectID, position, seq, author, key,
			[]Block{{Type: BlockText, Text: text}}, cursor, out, at, db.direct, req.Priority, req.RequestID,
			traceJSON(req.TraceContext), req.Webhook).QueryRow(func(row pgx.Row) error {
			return row.Scan(&ahead, &fair)
		})
		if _, err := AppendEvent(ctx, batchQuerier{b}, Event{OrganizationID: s.OrganizationID, ProjectID: s.ProjectID,
			Type: "planner.message", EntityType: "planner_session", EntityID: s.ID, Actor: caller.Actor,
			Payload: MustJSON(map[string]any{"seq": seq, "role": "user", "turn": id})}); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if err := lim.check(ctx, tx, s, counts); err != nil {
			return err
		}
		queuedAt := ahead + fair
		out.Position, out.CreatedAt = &queuedAt, at
		out.Role, out.Content = "user", []Block{{Type: BlockText, Text: text}}
		res = SendResult{Seq: seq, Turn: id, Position: queuedAt, Queued: out, Head: ahead == 0 && db.direct,
			Interrupted: interrupted}
		return nil
	})
	if errors.Is(err, errAlreadySent) {
		return res, nil
	}
	return res, err
}

// appendOutputs stores outputs with the session's next cursors. The caller's
// transaction must hold (or will take) the session row lock.
func appendOutputs(ctx context.Context, tx pgx.Tx, sessionID string, outs ...Output) ([]Output, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	var first int64
	var at time.Time
	if err := tx.QueryRow(ctx, `UPDATE planner_sessions SET next_cursor = next_cursor + $2
		WHERE id = $1 RETURNING next_cursor - $2, now()`, sessionID, len(outs)).Scan(&first, &at); err != nil {
		return nil, fmt.Errorf("append outputs: %w", err)
	}
	batch := &pgx.Batch{}
	for i := range outs {
		outs[i].Session = sessionID
		outs[i].Cursor = first + int64(i)
		outs[i].CreatedAt = at
		row := outs[i]
		row.Role, row.Content, row.CreatedAt = "", nil, time.Time{} // kept in their own columns
		batch.Queue(`INSERT INTO planner_outputs (session_id, cursor, turn_id, type, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			sessionID, outs[i].Cursor, outs[i].Turn, outs[i].Type, row, at)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("append outputs: %w", err)
	}
	return outs, nil
}

// ListOutputs returns up to limit stored outputs after fromCursor (tracker.read).
func (db *DB) ListOutputs(ctx context.Context, caller Caller, sessionID string, fromCursor int64, limit int) ([]Output, error) {
	if _, err := db.authorizedSession(ctx, caller, sessionID, PermTrackerRead); err != nil {
		return nil, err
	}
	if err := db.CheckOutputCursor(ctx, sessionID, fromCursor); err != nil {
		return nil, err
	}
	return db.Outputs(ctx, sessionID, fromCursor, limit)
}

// WatchSession returns the session a caller may watch the outputs of
// (tracker.read; not found for other organizations).
func (db *DB) WatchSession(ctx context.Context, caller Caller, sessionID string) (Session, error) {
	return db.authorizedSession(ctx, caller, sessionID, PermTrackerRead)
}

// outputSelect selects what scanOutput reads: a stored output, and for a
// message output its message, joined by (session, seq); a queued output
// carries the human's message that its turn answers the same way.
const outputSelect = `SELECT o.data, o.created_at, COALESCE(m.role, ''), m.content
	FROM planner_outputs o LEFT JOIN planner_messages m ON o.type IN ('message', 'queued')
		AND m.session_id = o.session_id AND m.seq = (o.data->>'seq')::bigint`

func scanOutput(row pgx.Row) (Output, error) {
	var o Output
	var at time.Time
	var role string
	var content []Block
	if err := row.Scan(&o, &at, &role, &content); err != nil {
		return o, err
	}
	o.CreatedAt, o.Role, o.Content = at, role, content
	return o, nil
}

// Outputs returns up to limit stored outputs after fromCursor, unchecked.
func (db *DB) Outputs(ctx context.Context, sessionID string, fromCursor int64, limit int) ([]Output, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := db.pool.Query(ctx, outputSelect+`
		WHERE o.session_id = $1 AND o.cursor > $2 ORDER BY o.cursor LIMIT $3`, sessionID, fromCursor, limit)
	if err != nil {
		return nil, fmt.Errorf("store: outputs: %w", err)
	}
	outs, err := collect(rows, scanOutput)
	if err != nil {
		return nil, fmt.Errorf("store: outputs: %w", err)
	}
	return outs, nil
}
