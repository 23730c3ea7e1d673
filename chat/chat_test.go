package chat

import (
	"strings"
	"testing"
)

// Options that exclude each other and an api URL that is not http(s) are
// refused, naming the flag, before anything is asked of the api.
func TestChatOptionsValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		o    Options
		want string // "" for valid
	}{
		{"http", Options{URL: "http://127.0.0.1:8080"}, ""},
		{"https with a path", Options{URL: "https://ballet.example.com/planner/", Session: "s1"}, ""},
		{"new in a project", Options{URL: "http://127.0.0.1:8080", Project: "DEMO", New: true}, ""},
		{"session and new", Options{URL: "http://127.0.0.1:8080", Session: "s1", New: true},
			"chat: --session and --new exclude each other"},
		{"another scheme", Options{URL: "ftp://x"}, `chat: --url "ftp://x": must be an http:// or https:// URL of the api`},
		{"no host", Options{URL: "http://"}, `chat: --url "http://": must be an http:// or https:// URL of the api`},
		{"no scheme", Options{URL: "127.0.0.1:8080"}, `chat: --url "127.0.0.1:8080": must be an http:// or https:// URL`},
		{"empty", Options{}, `chat: --url "": must be an http:// or https:// URL`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.o.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("Validate() = %v, want %q…", err, c.want)
			}
		})
	}
}

// Run refuses what Validate refuses, before it looks for a token or reads
// stdin.
func TestChatRunRefusesInvalidOptions(t *testing.T) {
	t.Parallel()
	err := Run(t.Context(), Options{URL: "http://127.0.0.1:1", Session: "s1", New: true}, nil, nil)
	if err == nil || err.Error() != "chat: --session and --new exclude each other" {
		t.Fatalf("Run() = %v, want the --session/--new refusal", err)
	}
}
