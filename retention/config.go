package retention

import (
	"fmt"
	"time"
)

// Config is the [retention] section: how long outputs, usage
// detail and events are kept. 0 keeps them forever.
type Config struct {
	// Outputs is how long the outputs of an ended turn (what watchers were
	// streamed) are kept. The transcript's messages are always kept, and
	// so are the outputs of turns not yet ended.
	Outputs time.Duration `toml:"outputs"`
	// UsageDetail is how long usage rows (one per model call) are kept;
	// older ones are rolled up into daily totals first, so that usage
	// reports keep their totals.
	UsageDetail time.Duration `toml:"usage_detail"`
	// Events is how long the event log is kept; a stream replay from
	// before what is kept is answered resync_required.
	Events time.Duration `toml:"events"`
	// Interval is how often the retention run is due; one run per interval
	// across every worker.
	Interval time.Duration `toml:"interval"`
	// Batch is how many rows one delete statement removes, each its own
	// short transaction.
	Batch int `toml:"batch"`
}

// DefaultConfig returns the built-in [retention] defaults: outputs
// and events for 30 days (well past any client reconnecting), usage detail
// for 90 days (a quarter of per-call rows, beyond the longest budget
// period), a run every hour, 1000 rows per statement.
func DefaultConfig() Config {
	return Config{
		Outputs:     30 * 24 * time.Hour,
		UsageDetail: 90 * 24 * time.Hour,
		Events:      30 * 24 * time.Hour,
		Interval:    time.Hour,
		Batch:       1000,
	}
}

// Limits of the [retention] keys.
const (
	// minRetention is the shortest window kept: an hour, far longer than a
	// client's reconnect.
	minRetention = time.Hour
	// minUsageDetail is the longest budget period (a month of 31 days)
	// plus a day: the detail of any budget period is always still there.
	minUsageDetail = 32 * 24 * time.Hour
	minInterval    = time.Second
	maxInterval    = 24 * time.Hour
	maxBatch       = 100_000
)

// Enabled reports whether anything is ever deleted.
func (c Config) Enabled() bool {
	return c.Outputs > 0 || c.UsageDetail > 0 || c.Events > 0
}

// Validate reports the first invalid key of the section.
func (c Config) Validate() error {
	switch {
	case c.Outputs != 0 && c.Outputs < minRetention:
		return fmt.Errorf("retention.outputs: must be 0 (keep forever) or at least %s, got %s", minRetention, c.Outputs)
	case c.UsageDetail != 0 && c.UsageDetail < minUsageDetail:
		return fmt.Errorf("retention.usage_detail: must be 0 (keep forever) or at least %s (the longest budget period, a month, and a day), got %s",
			minUsageDetail, c.UsageDetail)
	case c.Events != 0 && c.Events < minRetention:
		return fmt.Errorf("retention.events: must be 0 (keep forever) or at least %s, got %s", minRetention, c.Events)
	case c.Interval < minInterval || c.Interval > maxInterval:
		return fmt.Errorf("retention.interval: must be %s-%s, got %s", minInterval, maxInterval, c.Interval)
	case c.Batch < 1 || c.Batch > maxBatch:
		return fmt.Errorf("retention.batch: must be 1-%d, got %d", maxBatch, c.Batch)
	}
	return nil
}
