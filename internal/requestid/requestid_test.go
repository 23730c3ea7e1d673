package requestid

import (
	"context"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"req_0123abcd", true},
		{"trace-1:a.b_C", true},
		{strings.Repeat("a", MaxLen), true},
		{"", false},
		{strings.Repeat("a", MaxLen+1), false},
		{"a\tb", false},
		{"a\nX-Evil: 1", false},
		{"a b", false},
		{"idé", false},
		{"<script>", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.id); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// TestWithAndFrom: a context carries the id last set on it, and none when
// none was set or the last one set was empty.
func TestWithAndFrom(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"set", With(context.Background(), "req-9"), "req-9"},
		{"none", context.Background(), ""},
		{"cleared", With(With(context.Background(), "req-9"), ""), ""},
		{"replaced", With(With(context.Background(), "req-9"), "req-10"), "req-10"},
	}
	for _, tt := range tests {
		if got := From(tt.ctx); got != tt.want {
			t.Errorf("%s: From = %q, want %q", tt.name, got, tt.want)
		}
	}
}
