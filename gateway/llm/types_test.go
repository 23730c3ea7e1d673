package llm

import (
	"encoding/json"
	"testing"
)

func TestUsageDeltaApplyTo(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name     string
		delta    *UsageDelta
		want     Usage
		reported bool
	}{
		{"nil", nil, Usage{InputTokens: 1, OutputTokens: 2}, false},
		{"placeholders", &UsageDelta{InputTokens: n(0), OutputTokens: n(0)}, Usage{}, false},
		{"cumulative output", &UsageDelta{OutputTokens: n(9)}, Usage{InputTokens: 1, OutputTokens: 9}, true},
		{"every figure", &UsageDelta{InputTokens: n(3), OutputTokens: n(4), CacheCreationInputTokens: n(5), CacheReadInputTokens: n(6)},
			Usage{InputTokens: 3, OutputTokens: 4, CacheCreationInputTokens: 5, CacheReadInputTokens: 6}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := Usage{InputTokens: 1, OutputTokens: 2}
			if got := tt.delta.ApplyTo(&u); got != tt.reported || u != tt.want {
				t.Fatalf("ApplyTo = %v, usage %+v; want %v, %+v", got, u, tt.reported, tt.want)
			}
		})
	}
}

func TestToolInput(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", `{}`},
		{`{"q":"reset"}`, `{"q":"reset"}`},
		{`{"q":`, `{"_raw_arguments":"{\"q\":"}`},
	}
	for _, tt := range tests {
		got := ToolInput(tt.in)
		if string(got) != tt.want || !json.Valid(got) {
			t.Errorf("ToolInput(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestErrorTypeForStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   string
	}{
		{400, ErrInvalidRequest}, {422, ErrInvalidRequest}, {401, ErrAuthentication}, {403, ErrPermission},
		{404, ErrNotFound}, {413, ErrTooLarge}, {429, ErrRateLimit}, {503, ErrOverloaded}, {529, ErrOverloaded},
		{500, ErrAPI}, {502, ErrAPI},
	}
	for _, tt := range tests {
		if got := ErrorTypeForStatus(tt.status); got != tt.want {
			t.Errorf("ErrorTypeForStatus(%d) = %s, want %s", tt.status, got, tt.want)
		}
	}
}
