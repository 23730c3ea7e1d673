package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/requestid"
	"github.com/balletplanner/ballet/internal/tracing"
	"github.com/balletplanner/ballet/store"
)

// TypeTurn is the asynq task type of a planner turn.
const TypeTurn = "planner:turn"

// QueuePlanner is the queue planner turns run on, before the namespace.
const QueuePlanner = "planner"

// TurnPayload is the payload of a turn task.
type TurnPayload struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	// RequestID is the api request that sent the turn (its access log's
	// request_id), for the turn's log lines and gateway calls; "" for a
	// turn enqueued otherwise (the session's next turn, the sweeper).
	RequestID string `json:"request_id,omitempty"`
	// Traceparent and Tracestate are the trace of the send (W3C) when the
	// process that enqueued the task traces; the worker prefers the one
	// stored with the turn, which tasks enqueued without it (the
	// sweeper's) find there too.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// TraceContext is the payload's trace context; nil without one.
func (p TurnPayload) TraceContext() tracing.Carrier {
	if p.Traceparent == "" {
		return nil
	}
	c := tracing.Carrier{"traceparent": p.Traceparent}
	if p.Tracestate != "" {
		c["tracestate"] = p.Tracestate
	}
	return c
}

// Names derives queue and channel names from the Redis namespace, so that
// deployments and tests sharing one Redis never meet.
type Names struct{ Namespace string }

// Queue is the planner queue's name.
func (n Names) Queue() string { return n.Namespace + QueuePlanner }

// SessionChannel carries a session's planner outputs.
func (n Names) SessionChannel(session string) string {
	return n.Namespace + "ballet:planner:session:" + session
}

// QueueEmbed is the queue embedding runs on, before the namespace: its
// tasks and asynq server are package embeddings'.
const QueueEmbed = "embed"

// EmbedQueue is the embed queue's name.
func (n Names) EmbedQueue() string { return n.Namespace + QueueEmbed }

// QueueRetention is the queue retention runs on, before the namespace: its
// task, asynq server and scheduler are package retention's.
const QueueRetention = "retention"

// RetentionQueue is the retention queue's name.
func (n Names) RetentionQueue() string { return n.Namespace + QueueRetention }

// CancelChannel carries cancel nudges for running turns (turn ids).
func (n Names) CancelChannel() string { return n.Namespace + "ballet:planner:cancel" }

// Queue enqueues turn tasks and removes queued ones, over the process's one
// go-redis client.
type Queue struct {
	rdb       redis.UniversalClient
	names     Names
	client    *asynq.Client
	inspector *asynq.Inspector
	timeout   time.Duration
	// kept is how long asynq keeps a completed turn or embed task (its
	// Retention), for the dashboard's Completed tab; 0 deletes it at once.
	kept time.Duration
}

// QueueOption configures a Queue.
type QueueOption func(*Queue)

// KeepCompleted has asynq keep each completed turn and embed task for d
// (asynq's Retention), so that the dashboard's Completed tab lists it; 0,
// the default, deletes a task as it completes.
func KeepCompleted(d time.Duration) QueueOption { return func(q *Queue) { q.kept = d } }

// NewQueue builds a Queue; timeout is each turn task's asynq timeout.
func NewQueue(rdb redis.UniversalClient, names Names, timeout time.Duration, opts ...QueueOption) *Queue {
	q := &Queue{rdb: rdb, names: names, client: asynq.NewClientFromRedisClient(rdb),
		inspector: asynq.NewInspectorFromRedisClient(rdb), timeout: timeout}
	for _, o := range opts {
		o(q)
	}
	return q
}

// KeptCompleted is how long asynq keeps the queue's completed tasks
// (KeepCompleted); 0 when it does not.
func (q *Queue) KeptCompleted() time.Duration { return q.kept }

// KeepOptions is the asynq options that keep a completed task, if any
// (KeepCompleted), for the tasks of other queues enqueued on the queue's
// client.
func (q *Queue) KeepOptions() []asynq.Option {
	if q.kept <= 0 {
		return nil
	}
	return []asynq.Option{asynq.Retention(q.kept)}
}

// Names returns the queue's naming.
func (q *Queue) Names() Names { return q.names }

// Client is the queue's asynq client, for the tasks of the other queues
// (embeddings).
func (q *Queue) Client() *asynq.Client { return q.client }

// Inspector is the asynq inspector on the same client.
func (q *Queue) Inspector() *asynq.Inspector { return q.inspector }

// Enqueue puts a turn task in the planner queue under taskID (the turn id,
// or a resume id), with the request id ctx carries (requestid.With). A
// task already there under that id is not an error; one kept as completed
// (KeepCompleted) ran before and is replaced.
func (q *Queue) Enqueue(ctx context.Context, session, turn, taskID string) error {
	err := q.enqueue(ctx, session, turn, taskID)
	if errors.Is(err, asynq.ErrTaskIDConflict) && q.kept > 0 {
		info, ierr := q.inspector.GetTaskInfo(q.names.Queue(), taskID)
		if ierr == nil && info.State == asynq.TaskStateCompleted {
			if err = q.Delete(taskID); err == nil {
				err = q.enqueue(ctx, session, turn, taskID)
			}
		}
	}
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("tasks: enqueue turn %s: %w", turn, err)
	}
	return nil
}

// Resumed says what EnqueueFresh did.
type Resumed int

// EnqueueFresh outcomes.
const (
	// ResumeEnqueued: a new task was put in the queue; a worker runs it.
	ResumeEnqueued Resumed = iota
	// ResumeWaiting: a task under one of the ids is waiting in the queue
	// (pending, scheduled or retry) and will reach a worker.
	ResumeWaiting
	// ResumeBesideActive: a new task was put in the queue beside one that
	// a worker took and has not finished (perhaps a dead worker; on a busy
	// machine perhaps one that has not claimed the turn yet).
	ResumeBesideActive
)

// maxFreshIDs bounds how many ids EnqueueFresh tries for one task: each id
// held active (by a worker that died before it claimed the turn) moves it
// on to the next.
const maxFreshIDs = 8

// EnqueueFresh makes sure a task for the turn will reach a worker. It
// enqueues under taskID; when that id is held by a task that is active, it
// tries taskID:2, taskID:3, …: an active task may belong to a worker that
// died after taking it and before claiming the turn, which asynq recovers
// only a minute later. Extra tasks are harmless: the handler claims the turn
// through its lease and fencing token, and drops a task for a turn that is
// finished or held by a live lease. It never counts a conflict as success:
// the result says whether a task was enqueued or one is waiting, and an
// error means neither.
func (q *Queue) EnqueueFresh(ctx context.Context, session, turn, taskID string) (string, Resumed, error) {
	done := ResumeEnqueued
	for i, tries := 1, 0; i <= maxFreshIDs && tries < 3*maxFreshIDs; i, tries = i+1, tries+1 {
		id := taskID
		if i > 1 {
			id = fmt.Sprintf("%s:%d", taskID, i)
		}
		err := q.enqueue(ctx, session, turn, id)
		if err == nil {
			return id, done, nil
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) {
			return "", 0, fmt.Errorf("tasks: enqueue turn %s: %w", turn, err)
		}
		info, err := q.inspector.GetTaskInfo(q.names.Queue(), id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			i-- // gone in between (completed): the same id is free again
			continue
		case err != nil:
			return "", 0, fmt.Errorf("tasks: look up task %s: %w", id, err)
		}
		switch info.State {
		case asynq.TaskStatePending, asynq.TaskStateScheduled, asynq.TaskStateRetry, asynq.TaskStateAggregating:
			return id, ResumeWaiting, nil
		case asynq.TaskStateArchived, asynq.TaskStateCompleted:
			if err := q.Delete(id); err != nil {
				return "", 0, err
			}
			i-- // try the same id again
		}
		// Active: held by a worker, perhaps a dead one; try the next id.
		if info.State == asynq.TaskStateActive {
			done = ResumeBesideActive
		}
	}
	return "", 0, fmt.Errorf("tasks: enqueue turn %s: the ids %s to %s:%d are all held by active tasks", turn, taskID, taskID, maxFreshIDs)
}

func (q *Queue) enqueue(ctx context.Context, session, turn, taskID string) error {
	p := TurnPayload{Session: session, Turn: turn, RequestID: requestid.From(ctx)}
	if c := tracing.Inject(ctx); c != nil {
		p.Traceparent, p.Tracestate = c["traceparent"], c["tracestate"]
	}
	payload, err := p.Marshal()
	if err != nil {
		return err
	}
	task := asynq.NewTask(TypeTurn, payload, append(q.KeepOptions(), asynq.TaskID(taskID), asynq.Queue(q.names.Queue()),
		asynq.Timeout(q.timeout), asynq.MaxRetry(50))...)
	_, err = q.client.EnqueueContext(ctx, task)
	return err
}

// Exists reports whether a task with the id is in the planner queue and
// can still run. An archived one (retries exhausted) or one kept as
// completed cannot: it is deleted, so that the turn can be enqueued again
// under the same id.
func (q *Queue) Exists(taskID string) (bool, error) {
	info, err := q.inspector.GetTaskInfo(q.names.Queue(), taskID)
	switch {
	case err == nil && (info.State == asynq.TaskStateArchived || info.State == asynq.TaskStateCompleted):
		return false, q.Delete(taskID)
	case err == nil:
		return true, nil
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return false, nil
	}
	return false, fmt.Errorf("tasks: look up task %s: %w", taskID, err)
}

// Delete removes a queued task; an active or missing one is left alone.
func (q *Queue) Delete(taskID string) error {
	err := q.inspector.DeleteTask(q.names.Queue(), taskID)
	if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("tasks: delete task %s: %w", taskID, err)
	}
	return nil
}

// asynqQueues is asynq's registry of queue names (its base.AllQueues): the
// inspector and the dashboard know a queue only from it, and asynq adds a
// queue there only when a task is enqueued.
const asynqQueues = "asynq:queues"

// Register adds the namespace's queues to asynq's registry. After Redis
// lost its data the registry is empty until the next enqueue of each
// queue; a worker registers its queues again every so often, so that the
// dashboard and the inspector find them without a restart.
func (q *Queue) Register(ctx context.Context) error {
	if err := q.rdb.SAdd(ctx, asynqQueues, q.names.Queue(), q.names.EmbedQueue(), q.names.RetentionQueue()).Err(); err != nil {
		return fmt.Errorf("tasks: register queues: %w", err)
	}
	return nil
}

// QueueInfo counts a queue's tasks by state; a queue asynq does not know
// (none enqueued yet, or Redis lost its data) counts nothing. asynq's
// inspector answers an unknown queue with an error of its internal
// package, which ErrQueueNotFound does not match, so the registry is
// asked first.
func (q *Queue) QueueInfo(name string) (*asynq.QueueInfo, error) {
	known, err := q.rdb.SIsMember(context.Background(), asynqQueues, name).Result()
	if err != nil {
		return nil, fmt.Errorf("tasks: queue %s: %w", name, err)
	}
	if !known {
		return &asynq.QueueInfo{Queue: name}, nil
	}
	info, err := q.inspector.GetQueueInfo(name)
	if err != nil {
		return nil, fmt.Errorf("tasks: queue %s: %w", name, err)
	}
	return info, nil
}

// Close releases the asynq client and inspector (not the shared Redis client).
func (q *Queue) Close() {
	_ = q.client.Close()
}

// Publisher sends stored outputs (after commit) and text deltas to a
// session's watchers, and cancel nudges to workers.
type Publisher struct {
	rdb   redis.UniversalClient
	names Names
	log   *slog.Logger
}

// NewPublisher builds a Publisher.
func NewPublisher(rdb redis.UniversalClient, names Names, log *slog.Logger) *Publisher {
	return &Publisher{rdb: rdb, names: names, log: log}
}

// Publish sends outputs in order, in one round trip, and keeps the running
// round's text so far beside them for watchers that join mid-round; a text
// output is appended to the round's text as its current attempt (a worker
// streams with PublishText, which fences and places its text). Pub/sub
// is at-most-once: a watcher that misses one replays it from Postgres by
// cursor, so a failure is logged, not returned.
func (p *Publisher) Publish(ctx context.Context, outs ...store.Output) {
	p.PublishFenced(ctx, 0, outs...)
}

// PublishFenced is Publish for a worker that stored outs under its lease:
// attempt (LiveAttempt of its fencing token, try 0) becomes the running
// round's, so that text of an older attempt is dropped from then on.
func (p *Publisher) PublishFenced(ctx context.Context, attempt int64, outs ...store.Output) {
	for i, err := range p.publishAll(ctx, outs, attempt) {
		if o := outs[i]; err != nil {
			p.log.WarnContext(ctx, "publish output", slog.String("session", o.Session),
				slog.String("turn", o.Turn), slog.String("type", o.Type), slog.Any("error", err))
		}
	}
}

// TextDelta is a piece of a round's text as a worker streams it: Text
// starts at byte Offset of the text of Attempt.
type TextDelta struct {
	Session, Turn string
	Attempt       int64
	Offset        int64
	Text          string
}

// Text results beside the round's length.
const (
	// TextDropped: the delta's attempt is older than the round's, or its
	// turn is done: the worker streaming it lost its lease.
	TextDropped int64 = -1
	// TextUnplaced: Redis keeps no round for the session (its data was
	// lost); the delta was published without offsets.
	TextUnplaced int64 = -2
)

// PublishText places a text delta in its round and publishes what is new
// of it. It returns the length of the round's text (send from there next),
// TextDropped or TextUnplaced.
func (p *Publisher) PublishText(ctx context.Context, d TextDelta) (int64, error) {
	head, err := textHead(d.Session, d.Turn)
	if err != nil {
		return 0, err
	}
	script, keys, args, _ := p.textArgs(head, d)
	n, err := script.Run(ctx, p.rdb, keys, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("tasks: publish text of turn %s: %w", d.Turn, err)
	}
	return n, nil
}

// FenceRound raises the running round's attempt of turn to attempt, which
// drops the text of older attempts from then on. A worker that takes a
// turn over calls it before it streams.
func (p *Publisher) FenceRound(ctx context.Context, session, turn string, attempt int64) error {
	hash := p.names.PartialKey(session)
	if err := fenceRound.Run(ctx, p.rdb, []string{hash, hash + partialTextSuffix}, turn, attempt, partialTTLArg).Err(); err != nil {
		return fmt.Errorf("tasks: fence the round of turn %s: %w", turn, err)
	}
	return nil
}

// NudgeCancel tells every worker that the turns should stop now.
func (p *Publisher) NudgeCancel(ctx context.Context, turns ...string) {
	for _, t := range turns {
		if err := p.rdb.Publish(ctx, p.names.CancelChannel(), t).Err(); err != nil {
			p.log.WarnContext(ctx, "cancel nudge", slog.String("turn", t), slog.Any("error", err))
		}
	}
}
