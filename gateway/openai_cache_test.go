package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// cachedToolRequest is toolRequest with a breakpoint on every block that
// may carry one: the tool, the system prompt, and each message's blocks.
func cachedToolRequest(stream bool) llm.MessageRequest {
	r := toolRequest(stream)
	mark := func() *llm.CacheControl { return &llm.CacheControl{Type: "ephemeral", TTL: "5m"} }
	r.Tools[0].CacheControl = mark()
	r.System[0].CacheControl = mark()
	for _, m := range r.Messages {
		for i := range m.Content {
			m.Content[i].CacheControl = mark()
		}
	}
	return r
}

func TestOpenAITranslationDropsCacheControl(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakellm.MustParse(openaiScript), withProvider(store.ProviderOpenAI))
			sent, _ := json.Marshal(cachedToolRequest(stream))
			if n := bytes.Count(sent, []byte(`"cache_control"`)); n != 7 {
				t.Fatalf("the request carries %d markers, want 7: %s", n, sent)
			}
			resp, body := e.post(t, e.token(t), sent)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			reqs := e.fake.Requests()
			if len(reqs) != 1 || reqs[0].Path != "/v1/chat/completions" {
				t.Fatalf("upstream received %d requests (%+v), want one chat completion", len(reqs), reqs)
			}
			up := reqs[0].Body
			if bytes.Contains(up, []byte("cache_control")) || bytes.Contains(up, []byte("ephemeral")) {
				t.Fatalf("the OpenAI upstream received a cache marker: %s", up)
			}
			// The translation kept everything else: system, tool, both tool
			// rounds' messages.
			var got struct {
				Messages []struct {
					Role string `json:"role"`
				} `json:"messages"`
				Tools []json.RawMessage `json:"tools"`
			}
			if err := json.Unmarshal(up, &got); err != nil {
				t.Fatal(err)
			}
			var roles []string
			for _, m := range got.Messages {
				roles = append(roles, m.Role)
			}
			if want := []string{"system", "user", "assistant", "tool", "user"}; len(got.Tools) != 1 || !slices.Equal(roles, want) {
				t.Fatalf("upstream got roles %v and %d tools, want %v and 1", roles, len(got.Tools), want)
			}
		})
	}
}
