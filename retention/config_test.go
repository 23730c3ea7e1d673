package retention_test

import (
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/retention"
)

// TestRetentionConfigValidate: the defaults pass, 0 keeps forever, and a
// window that would break an invariant names its key.
func TestRetentionConfigValidate(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tt := range []struct {
		name string
		edit func(*retention.Config)
		want string
	}{
		{"defaults", func(*retention.Config) {}, ""},
		{"keep forever", func(c *retention.Config) { c.Outputs, c.UsageDetail, c.Events = 0, 0, 0 }, ""},
		{"outputs too short", func(c *retention.Config) { c.Outputs = time.Minute }, "retention.outputs: must be 0 (keep forever) or at least 1h0m0s"},
		{"negative events", func(c *retention.Config) { c.Events = -time.Hour }, "retention.events:"},
		{"usage within a budget month", func(c *retention.Config) { c.UsageDetail = 31 * day }, "retention.usage_detail: must be 0 (keep forever) or at least 768h0m0s"},
		{"usage past a month and a day", func(c *retention.Config) { c.UsageDetail = 32 * day }, ""},
		{"interval zero", func(c *retention.Config) { c.Interval = 0 }, "retention.interval: must be 1s-24h0m0s"},
		{"batch zero", func(c *retention.Config) { c.Batch = 0 }, "retention.batch: must be 1-100000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := retention.DefaultConfig()
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
