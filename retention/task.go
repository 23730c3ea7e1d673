package retention

import (
	"encoding/json"
	"fmt"
	"time"
)

// TaskType is the asynq task type of a retention run: it deletes
// outputs, usage detail (rolled up by day first) and events older than
// their [retention] windows.
const TaskType = "maintenance:retention"

// TaskID is the task id of the scheduled retention run: while one waits,
// runs or is kept as completed, the schedulers of the other workers
// coalesce into it.
const TaskID = "retention"

// Payload is the payload of a retention run. The run reads
// nothing of it (a run enqueued with an empty payload runs the same): it
// is JSON so that the dashboard shows it as text.
type Payload struct {
	// Every is the retention.interval of the scheduler that enqueued it.
	Every string `json:"every"`
}

// TaskPayload is the payload of the runs a scheduler enqueues
// every interval.
func TaskPayload(interval time.Duration) ([]byte, error) {
	b, err := json.Marshal(Payload{Every: interval.String()})
	if err != nil {
		return nil, fmt.Errorf("retention: encode retention payload: %w", err)
	}
	return b, nil
}
