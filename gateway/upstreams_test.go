package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestUpstreamRules(t *testing.T) {
	t.Parallel()
	u, err := NewUpstreams("api.anthropic.com", "llm.internal:8443", "http://10.0.0.5:11434/v1", "http://vllm.lan/", "HTTPS://Mixed.Example")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		base string
		want string // "" when allowed, else a part of the refusal
	}{
		{"https://api.anthropic.com", ""},
		{"https://api.anthropic.com/", ""},
		{"https://api.anthropic.com:443/v1", ""},
		{"https://API.Anthropic.COM.", ""},
		{"https://llm.internal:8443/v1", ""},
		{"http://10.0.0.5:11434/v1", ""},
		{"http://10.0.0.5:11434/v1/", ""},
		{"http://10.0.0.5:11434/v1/chat", ""},
		{"http://vllm.lan:80/openai/v1", ""},
		{"https://mixed.example/x", ""},

		{"http://api.anthropic.com", "is not listed"},                // scheme
		{"https://api.anthropic.com:8443", "is not listed"},          // port
		{"https://llm.internal", "is not listed"},                    // port 443, not 8443
		{"https://api.anthropic.com.evil.example", "is not listed"},  // suffix
		{"https://evil.example/api.anthropic.com", "is not listed"},  // path
		{"https://api.anthropic.com@127.0.0.1", "user or password"},  // userinfo
		{"https://x:y@api.anthropic.com", "user or password"},        // userinfo on an allowed host
		{"http://10.0.0.5:11434/v10", "is not listed"},               // prefix by whole segments
		{"http://10.0.0.5:11434", "is not listed"},                   // above the prefix
		{"http://10.0.0.5:11434/v1/../admin", ". or .."},             // dot segments
		{"http://10.0.0.5:11434/v1/%2e%2e/admin", "percent-escapes"}, // escaped dots
		{"http://10.0.0.5:11434/v1%2F..%2Fadmin", "percent-escapes"}, // escaped slash
		{"http://10.0.0.5:11434/v1//x", "empty segments"},            // empty segment
		{"http://10.0.0.5:11434/v1?x=1", "query"},                    // query
		{"http://10.0.0.5:11434/v1#frag", "fragment"},                // fragment
		{"http://127.0.0.1:11434/v1", "is not listed"},               // loopback
		{"http://[::1]:11434/v1", "is not listed"},                   // loopback v6
		{"ftp://api.anthropic.com", "scheme"},                        // scheme
		{"api.anthropic.com", "scheme"},                              // not a URL
		{"https:api.anthropic.com", "host"},                          // opaque
		{"https://", "host"},                                         // no host
		{"http://10.0.0.5:11434\\@evil.example/v1", "not a URL"},     // backslash
		{"http://0x0a.0.0.5:11434/v1", "is not listed"},              // another spelling of the address
		{"http://10.0.0.5:11434/v1\n", "not a URL"},                  // control character
		{"https://llm.internal:8443:8443", "not a URL"},              // two ports
		{"https://api.anthropic.com:443@evil.example", "user or password"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			t.Parallel()
			err := u.Check(tt.base)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrUpstreamNotAllowed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestDefaultUpstreamsAreTheOfficialHosts(t *testing.T) {
	t.Parallel()
	u, err := DefaultConfig().Upstreams()
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"https://api.anthropic.com", "https://api.openai.com/v1", "https://api.openai.com"} {
		if err := u.Check(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://127.0.0.1:8080", "http://localhost:11434/v1", "http://169.254.169.254/latest",
		"http://api.openai.com/v1", "https://openrouter.ai/api/v1"} {
		if err := u.Check(bad); err == nil {
			t.Errorf("%s allowed by default", bad)
		}
	}
	// The provider URLs the operator configures are allowed with them.
	cfg := DefaultConfig()
	cfg.OpenAIURL = "http://ollama.lan:11434/v1"
	if u, err = cfg.Upstreams(); err != nil {
		t.Fatal(err)
	}
	if err := u.Check("http://ollama.lan:11434/v1"); err != nil {
		t.Fatal(err)
	}
}

// TestUpstreamsCheckAnswersStayRightWhenKept: Check's kept answers follow
// the allow list as it grows, and stay right past the most it keeps.
func TestUpstreamsCheckAnswersStayRightWhenKept(t *testing.T) {
	t.Parallel()
	u, err := NewUpstreams("http://10.0.0.5:11434/v1")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := u.Check("http://10.0.0.6:80"); !errors.Is(err, ErrUpstreamNotAllowed) {
			t.Fatalf("unlisted: %v", err)
		}
	}
	if err := u.allow("http://10.0.0.6:80"); err != nil {
		t.Fatal(err)
	}
	if err := u.Check("http://10.0.0.6:80"); err != nil {
		t.Fatalf("after allow: %v", err)
	}
	for i := range maxChecked + 10 {
		allowed := i%2 == 0
		base := fmt.Sprintf("http://10.0.0.5:11434/v1/p%d", i)
		if !allowed {
			base = fmt.Sprintf("http://10.0.0.5:11435/v1/p%d", i)
		}
		for range 2 {
			if err := u.Check(base); (err == nil) != allowed {
				t.Fatalf("%s: %v, want allowed %v", base, err, allowed)
			}
		}
	}
}
