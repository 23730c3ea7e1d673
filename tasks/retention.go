package tasks

import (
	"encoding/json"
	"fmt"
	"time"
)

// TypeRetention is the asynq task type of a retention run: it deletes
// outputs, usage detail (rolled up by day first) and events older than
// their [retention] windows.
const TypeRetention = "maintenance:retention"

// QueueRetention is the queue retention runs on, before the namespace. It
// has an asynq server of its own on each worker, one slot, so that a run
// never takes a planner turn's slot.
const QueueRetention = "retention"

// RetentionTaskID is the task id of the scheduled retention run: while one
// waits, runs or is kept as completed, the schedulers of the other workers
// coalesce into it.
const RetentionTaskID = "retention"

// RetentionQueue is the retention queue's name.
func (n Names) RetentionQueue() string { return n.Namespace + QueueRetention }

// RetentionPayload is the payload of a retention run. The run reads
// nothing of it (a run enqueued with an empty payload runs the same): it
// is JSON so that the dashboard shows it as text.
type RetentionPayload struct {
	// Every is the retention.interval of the scheduler that enqueued it.
	Every string `json:"every"`
}

// RetentionTaskPayload is the payload of the runs a scheduler enqueues
// every interval.
func RetentionTaskPayload(interval time.Duration) ([]byte, error) {
	b, err := json.Marshal(RetentionPayload{Every: interval.String()})
	if err != nil {
		return nil, fmt.Errorf("tasks: encode retention payload: %w", err)
	}
	return b, nil
}
