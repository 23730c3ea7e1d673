package store

import "testing"

func TestLooksLikeUUID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11", true},
		{"7B0C7C43-8D6B-4A53-9A43-0C9A0C0D7D11", true},
		{"00000000-0000-0000-0000-000000000000", true},
		{"", false},
		{"x", false},
		{"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d1", false},
		{"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d111", false},
		{"7b0c7c438d6b4a539a430c9a0c0d7d11", false},
		{"urn:uuid:7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11", false},
		{"{7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d11}", false},
		{"7b0c7c43+8d6b-4a53-9a43-0c9a0c0d7d11", false},
		{"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d1g", false},
		{"7b0c7c43-8d6b-4a53-9a43-0c9a0c0d7d\u00e9", false},
	} {
		if got := looksLikeUUID(tc.in); got != tc.want {
			t.Errorf("looksLikeUUID(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
