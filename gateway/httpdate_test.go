package gateway

import (
	"net/http"
	"testing"
	"time"
)

// TestHTTPDateIsNetHTTPs: the Date header a stream gets is the one net/http
// would write, for each second.
func TestHTTPDateIsNetHTTPs(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 1, 20, 0, 0, 0, time.FixedZone("x", 3600))
	for _, at := range []time.Time{base, base.Add(300 * time.Millisecond), base.Add(time.Second), base.Add(-time.Hour)} {
		if got, want := httpDate(at), at.UTC().Format(http.TimeFormat); len(got) != 1 || got[0] != want {
			t.Errorf("httpDate(%v) = %q, want %q", at, got, want)
		}
	}
}
