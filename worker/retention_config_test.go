package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/worker"
)

// TestRetentionConfigValidate: the defaults pass, 0 keeps forever, and a
// window that would break an invariant names its key.
func TestRetentionConfigValidate(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tt := range []struct {
		name string
		edit func(*worker.RetentionConfig)
		want string
	}{
		{"defaults", func(*worker.RetentionConfig) {}, ""},
		{"keep forever", func(c *worker.RetentionConfig) { c.Outputs, c.UsageDetail, c.Events = 0, 0, 0 }, ""},
		{"outputs too short", func(c *worker.RetentionConfig) { c.Outputs = time.Minute }, "retention.outputs: must be 0 (keep forever) or at least 1h0m0s"},
		{"negative events", func(c *worker.RetentionConfig) { c.Events = -time.Hour }, "retention.events:"},
		{"usage within a budget month", func(c *worker.RetentionConfig) { c.UsageDetail = 31 * day }, "retention.usage_detail: must be 0 (keep forever) or at least 768h0m0s"},
		{"usage past a month and a day", func(c *worker.RetentionConfig) { c.UsageDetail = 32 * day }, ""},
		{"interval zero", func(c *worker.RetentionConfig) { c.Interval = 0 }, "retention.interval: must be 1s-24h0m0s"},
		{"batch zero", func(c *worker.RetentionConfig) { c.Batch = 0 }, "retention.batch: must be 1-100000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := worker.DefaultRetentionConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want %q…", err, tt.want)
			}
		})
	}
}
