package fakellm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/store/storetest"
)

func TestParseRejectsBadScripts(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src, want string }{
		{"empty", `answers: []`, "no answers"},
		{"unknown field", "answers:\n  - contnet: [{text: x}]", "contnet"},
		{"bad regexp", "answers:\n  - match: '('\n    content: [{text: x}]", "match"},
		{"both text and tool", "answers:\n  - content: [{text: x, tool_use: {name: y}}]", "exactly one"},
		{"tool without name", "answers:\n  - content: [{tool_use: {input: {}}}]", "needs a name"},
		{"unknown fault", "answers:\n  - fault: {kind: explode}", "unknown fault"},
		{"status fault without status", "answers:\n  - fault: {kind: status}", "status ≥ 400"},
		{"nothing", "answers:\n  - usage: {input_tokens: 1}", "no content"},
		{"hold without a file", "answers:\n  - content: [{text: x}]\n    hold_after: 2", "needs hold_until"},
		{"negative hold", "answers:\n  - content: [{text: x}]\n    hold_after: -1\n    hold_until: /x", "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := fakellm.Parse([]byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// JSON reads too.
	if _, err := fakellm.Parse([]byte(`{"answers":[{"content":[{"text":"hi"}],"chunk_latency":"5ms"}]}`)); err != nil {
		t.Fatal(err)
	}
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestOrderAndMatch(t *testing.T) {
	t.Parallel()
	s := fakellm.New(fakellm.MustParse(`
answers:
  - match: 'weather'
    content: [{text: "sunny"}]
  - match: '^\[tool_result lookup\] found'
    content: [{text: "thanks for the lookup"}]
  - content: [{text: "first"}]
  - content: [{text: "second"}]
`))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ask := func(messages string) string {
		_, body := post(t, s.URL()+"/v1/messages", `{"model":"m","max_tokens":5,"messages":`+messages+`}`)
		var m struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		json.Unmarshal([]byte(body), &m)
		if m.Error != nil {
			return "error: " + m.Error.Message
		}
		return m.Content[0].Text
	}
	steps := []struct{ messages, want string }{
		{`[{"role":"user","content":"hello"}]`, "first"},
		{`[{"role":"user","content":"how is the weather?"}]`, "sunny"},
		{`[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"lookup","input":{}}]},
		   {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"found it"}]}]`, "thanks for the lookup"},
		{`[{"role":"user","content":"again"}]`, "second"},
		{`[{"role":"user","content":"more"}]`, "error: fake: the script's 2 ordered answers are used up"},
	}
	for i, st := range steps {
		if got := ask(st.messages); got != st.want {
			t.Fatalf("step %d: %q, want %q", i, got, st.want)
		}
	}
}

func TestStreamIsChunked(t *testing.T) {
	t.Parallel()
	s := fakellm.New(fakellm.MustParse(`
answers:
  - content: [{text: "abcdefghij"}, {tool_use: {id: t1, name: read_skill, input: {name: planner}}}]
    chunk_size: 4
    usage: {input_tokens: 9, output_tokens: 8}
`))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, body := post(t, s.URL()+"/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
	var names []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, n)
		}
	}
	want := "message_start,ping,content_block_start,content_block_delta,content_block_delta,content_block_delta,content_block_stop," +
		"content_block_start,content_block_delta,content_block_delta,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if strings.Join(names, ",") != want {
		t.Fatalf("events = %v", names)
	}
	if !strings.Contains(body, `"usage":{"output_tokens":8}`) || !strings.Contains(body, `"stop_reason":"tool_use"`) {
		t.Fatalf("body = %s", body)
	}
}

// A held answer streams its first deltas, then nothing more until its file
// exists; each delta after the hold is read only once the file is there.
func TestStreamHoldsUntilItsFileExists(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	s := fakellm.New(fakellm.MustParse(fmt.Sprintf(`
answers:
  - content: [{text: "abcdefghijkl"}]
    chunk_size: 4
    hold_after: 2
    hold_until: %q
`, release)))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Post(s.URL()+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type delta struct {
		text     string
		released bool
	}
	deltas := make(chan delta, 8)
	go func() {
		defer close(deltas)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev struct {
				Type  string `json:"type"`
				Delta struct {
					Text string `json:"text"`
				} `json:"delta"`
			}
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(d), &ev) == nil && ev.Type == "content_block_delta" {
				_, statErr := os.Stat(release)
				deltas <- delta{ev.Delta.Text, statErr == nil}
			}
		}
	}()
	var got []delta
	for d := range deltas {
		got = append(got, d)
		if len(got) == 2 {
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []delta{{"abcd", false}, {"efgh", false}, {"ijkl", true}}
	if !slices.Equal(got, want) {
		t.Fatalf("deltas = %+v, want %+v", got, want)
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fakellm.Serve(ctx, ln, fakellm.Demo()) }()
	var resp *http.Response
	storetest.Poll(storetest.WaitTimeout, func() bool {
		resp, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"plan a feature"}]}`))
		return err == nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"name":"list_runnable"`) || !strings.Contains(string(b), `"finish_reason":"tool_calls"`) {
		t.Fatalf("demo answer = %s", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
