package ssrf_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/balletplanner/ballet/internal/ssrf"
)

func TestPublic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want bool
	}{
		{"93.184.216.34", true},
		{"2606:2800:220:1::1", true},
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"fe80::1", false},
		{"fc00::1", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"224.0.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			if got := ssrf.Public(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("Public(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

func TestDialControl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		address      string
		allowPrivate bool
		refused      bool
	}{
		{"93.184.216.34:443", false, false},
		{"127.0.0.1:8080", false, true},
		{"[::1]:443", false, true},
		{"169.254.169.254:80", false, true},
		{"127.0.0.1:8080", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			t.Parallel()
			err := ssrf.DialControl(tt.allowPrivate)("tcp", tt.address, nil)
			if got := errors.Is(err, ssrf.ErrPrivateAddress); got != tt.refused || (!tt.refused && err != nil) {
				t.Fatalf("DialControl(%v)(%s) = %v, want refused %v", tt.allowPrivate, tt.address, err, tt.refused)
			}
		})
	}
}

func TestParseEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry, want string // want: the endpoint, or "" when refused
	}{
		{"hooks.example.com", "https://hooks.example.com:443"},
		{"http://127.0.0.1:9000/hooks", "http://127.0.0.1:9000"},
		{"*.example.com", ""},
		{"https://u:p@hooks.example.com", ""},
		{"ftp://hooks.example.com", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			t.Parallel()
			ep, err := ssrf.ParseEntry(tt.entry)
			if (err != nil) != (tt.want == "") || (err == nil && ep.String() != tt.want) {
				t.Fatalf("ParseEntry(%q) = %v, %v; want %q", tt.entry, ep, err, tt.want)
			}
		})
	}
}
