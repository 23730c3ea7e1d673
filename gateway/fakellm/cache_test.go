package fakellm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/balletplanner/ballet/gateway/llm"
)

// prompt describes a request for the cache tests.
type prompt struct {
	model    string
	tools    int  // tool definitions of about 500 characters each
	markTool bool // breakpoint on the last tool
	system   string
	markSys  bool
	msgs     int   // one text block each, alternating user and assistant
	marks    []int // messages whose block is a breakpoint; -1 is the last
	stream   bool
}

func (p prompt) body(t *testing.T) []byte {
	t.Helper()
	req := llm.MessageRequest{Model: p.model, MaxTokens: 10, Stream: p.stream}
	if req.Model == "" {
		req.Model = "claude-test"
	}
	for i := range p.tools {
		req.Tools = append(req.Tools, llm.Tool{Name: fmt.Sprintf("tool_%d", i), Description: strings.Repeat("does things ", 40),
			InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	if p.markTool && len(req.Tools) > 0 {
		req.Tools[len(req.Tools)-1].CacheControl = &llm.CacheControl{Type: "ephemeral"}
	}
	if p.system != "" {
		req.System = llm.Content{{Type: llm.BlockText, Text: p.system}}
		if p.markSys {
			req.System[0].CacheControl = &llm.CacheControl{Type: "ephemeral"}
		}
	}
	for i := range p.msgs {
		role := llm.RoleUser
		if i%2 == 1 {
			role = llm.RoleAssistant
		}
		req.Messages = append(req.Messages, llm.Message{Role: role, Content: llm.Content{
			{Type: llm.BlockText, Text: fmt.Sprintf("message %d: %s", i, strings.Repeat("words ", 30))}}})
	}
	for _, m := range p.marks {
		if m < 0 {
			m = len(req.Messages) - 1
		}
		req.Messages[m].Content[0].CacheControl = &llm.CacheControl{Type: "ephemeral"}
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	longSystem  = strings.Repeat("You plan software. ", 300) // ~1,400 tokens
	otherSystem = strings.Repeat("You plan hardware. ", 300)
)

// call posts a prompt to the fake and returns the usage it reports, from
// the JSON answer or from a stream's message_start.
func call(t *testing.T, url string, p prompt) Usage {
	t.Helper()
	body := p.body(t)
	resp, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u struct {
		Input  int64 `json:"input_tokens"`
		Read   int64 `json:"cache_read_input_tokens"`
		Create int64 `json:"cache_creation_input_tokens"`
	}
	if p.stream {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			var ev struct {
				Type    string `json:"type"`
				Message struct {
					Usage json.RawMessage `json:"usage"`
				} `json:"message"`
			}
			if ok && json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "message_start" {
				if err := json.Unmarshal(ev.Message.Usage, &u); err != nil {
					t.Fatalf("message_start usage: %v", err)
				}
				break
			}
		}
	} else {
		b, _ := io.ReadAll(resp.Body)
		var m struct {
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(b, &m); err != nil || json.Unmarshal(m.Usage, &u) != nil {
			t.Fatalf("answer %s", b)
		}
	}
	got := Usage{InputTokens: u.Input, CacheReadInputTokens: u.Read, CacheCreationInputTokens: u.Create}
	// Whatever the split, it sums to the fake's estimate of the request.
	if total := int64(len(body)+3) / 4; got.InputTokens+got.CacheReadInputTokens+got.CacheCreationInputTokens != total {
		t.Fatalf("usage %+v does not sum to the request's %d tokens", got, total)
	}
	return got
}

// clock is a settable time for the cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) get() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestPromptCacheAccounting(t *testing.T) {
	t.Parallel()
	convo := func(msgs int, marks ...int) prompt {
		return prompt{system: longSystem, markSys: true, msgs: msgs, marks: marks}
	}
	// step is one request, after waiting wait, and what its usage must be
	// given the usages before it (read and write are checked when set).
	type step struct {
		p     prompt
		wait  time.Duration
		check func(prev []Usage, u Usage) string
	}
	readsAll := func(of int) func([]Usage, Usage) string { // reads what call `of` read and wrote, writes nothing new
		return func(prev []Usage, u Usage) string {
			if want := prev[of].CacheReadInputTokens + prev[of].CacheCreationInputTokens; u.CacheReadInputTokens != want || u.CacheCreationInputTokens != 0 {
				return fmt.Sprintf("want read %d, write 0", want)
			}
			return ""
		}
	}
	readsThenWrites := func(of int) func([]Usage, Usage) string { // reads what call `of` cached, writes the rest
		return func(prev []Usage, u Usage) string {
			if want := prev[of].CacheReadInputTokens + prev[of].CacheCreationInputTokens; u.CacheReadInputTokens != want || u.CacheCreationInputTokens == 0 {
				return fmt.Sprintf("want read %d and a write", want)
			}
			return ""
		}
	}
	writesOnly := func(_ []Usage, u Usage) string {
		if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens < minCacheTokens {
			return "want read 0, a write of at least the minimum"
		}
		return ""
	}
	nothing := func(_ []Usage, u Usage) string {
		if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 {
			return "want no cache use"
		}
		return ""
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first call writes, second reads", []step{
			{p: convo(3, -1), check: writesOnly},
			{p: convo(3, -1), check: readsAll(0)},
		}},
		{"a longer conversation reads the prefix and writes its new blocks", []step{
			{p: convo(3, -1), check: writesOnly},
			{p: convo(5, -1), check: readsThenWrites(0)},
			{p: convo(7, 4, -1), check: readsThenWrites(1)},
		}},
		{"changed system prompt misses", []step{
			{p: convo(3, -1), check: writesOnly},
			{p: prompt{system: otherSystem, markSys: true, msgs: 3, marks: []int{-1}}, check: writesOnly},
		}},
		{"changed system prompt still reads the tools", []step{
			{p: prompt{tools: 12, markTool: true, markSys: true, system: "short", msgs: 1}, check: writesOnly},
			{p: prompt{tools: 12, markTool: true, markSys: true, system: "other", msgs: 1}, check: func(prev []Usage, u Usage) string {
				// the tools' prefix is the first call's write minus the system block
				if u.CacheReadInputTokens == 0 || u.CacheReadInputTokens >= prev[0].CacheCreationInputTokens || u.CacheCreationInputTokens == 0 {
					return "want a read of the tools and a write of the system prompt"
				}
				return ""
			}},
		}},
		{"another model misses", []step{
			{p: convo(3, -1), check: writesOnly},
			{p: prompt{model: "claude-other", system: longSystem, markSys: true, msgs: 3, marks: []int{-1}}, check: writesOnly},
		}},
		{"under the minimum nothing is cached", []step{
			{p: prompt{system: "short", markSys: true, msgs: 3, marks: []int{-1}}, check: nothing},
			{p: prompt{system: "short", markSys: true, msgs: 3, marks: []int{-1}}, check: nothing},
		}},
		{"without breakpoints everything is input", []step{
			{p: prompt{system: longSystem, msgs: 3}, check: nothing},
			{p: prompt{system: longSystem, msgs: 3}, check: nothing},
		}},
		{"a hit 20 blocks back is read", []step{
			{p: convo(3), check: writesOnly}, // the system prompt alone
			{p: convo(3, -1), check: readsThenWrites(0)},
			{p: convo(23, -1), check: readsThenWrites(1)},
		}},
		{"a hit 21 blocks back is not: only the system prompt is read", []step{
			{p: convo(3), check: writesOnly},
			{p: convo(3, -1), check: readsThenWrites(0)},
			{p: convo(24, -1), check: readsThenWrites(0)},
		}},
		{"a second breakpoint reaches further back", []step{
			{p: convo(3), check: writesOnly},
			{p: convo(3, -1), check: readsThenWrites(0)},
			{p: convo(30, 2, -1), check: readsThenWrites(1)},
		}},
		{"a prefix expires after five minutes", []step{
			{p: convo(3, -1), check: writesOnly},
			{p: convo(3, -1), wait: cacheTTL + time.Second, check: writesOnly},
		}},
		{"a read keeps it for five more minutes", []step{
			{p: convo(3, -1), check: writesOnly},
			{p: convo(3, -1), wait: 4 * time.Minute, check: readsAll(0)},
			{p: convo(3, -1), wait: 4 * time.Minute, check: readsAll(0)},
		}},
		{"streamed answers report it in message_start", []step{
			{p: prompt{system: longSystem, markSys: true, msgs: 3, marks: []int{-1}, stream: true}, check: writesOnly},
			{p: prompt{system: longSystem, markSys: true, msgs: 3, marks: []int{-1}, stream: true}, check: readsAll(0)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(MustParse("loop: true\nanswers:\n  - content: [{text: ok}]\n"))
			clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			s.cache.now = clk.get
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()
			var usages []Usage
			for i, st := range tt.steps {
				clk.add(st.wait)
				u := call(t, hs.URL, st.p)
				if msg := st.check(usages, u); msg != "" {
					t.Fatalf("call %d: usage %+v: %s (earlier: %+v)", i, u, msg, usages)
				}
				usages = append(usages, u)
			}
		})
	}
}

func TestScriptedUsageIsReportedAsGiven(t *testing.T) {
	t.Parallel()
	s := New(MustParse("loop: true\nanswers:\n  - content: [{text: ok}]\n    usage: {input_tokens: 7, output_tokens: 3, cache_read_input_tokens: 5}\n"))
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	for range 2 {
		body := prompt{system: longSystem, markSys: true, msgs: 1, marks: []int{-1}}.body(t)
		resp, err := http.Post(hs.URL+"/v1/messages", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"input_tokens":7`) {
			t.Fatalf("answer %s", b)
		}
	}
}
