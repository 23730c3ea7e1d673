// Package fakellm is a scripted fake LLM upstream speaking the Anthropic
// Messages API and the OpenAI Chat Completions API over real HTTP, for
// development (`ballet fake-llm`, gateway.fake) and tests.
//
// A script is a list of answers, written in YAML or JSON (YAML 1.2 reads
// both; go.yaml.in/yaml/v3 parses them). Each request gets the first answer
// whose match (a regexp) matches the last user message; answers without a
// match are handed out in order, once each (or round and round with loop).
// The text matched is the last user message's text, with each tool result
// written as "[tool_result <tool name>] <result text>".
//
// The fake also serves POST /v1/embeddings (and /embeddings, the OpenAI
// base-URL form) with deterministic vectors (Embed, Concepts), and POST
// /v1/messages/count_tokens, counting four characters a token like its
// usage figures. To make embeddings calls fail, for retry tests, set
//
//	embeddings: {fail_first: 2, status: 503}
//
// in the script, or call Server.FailEmbeddings(n, status) on a running fake:
// the next n embeddings calls are answered status with an OpenAI error body.
package fakellm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

// Script is what the fake answers.
type Script struct {
	// Name labels the script in logs.
	Name string `yaml:"name"`
	// Loop starts the ordered answers over once they are used up; without it
	// a request past the last answer gets a 500.
	Loop bool `yaml:"loop"`
	// Answers are tried by match first, then handed out in order.
	Answers []Answer `yaml:"answers"`
	// Embeddings shapes the answers of POST /v1/embeddings, which are
	// otherwise computed (see Embed) and never scripted.
	Embeddings *Embeddings `yaml:"embeddings"`
}

// Embeddings are the faults and figures of the fake's embeddings answers.
type Embeddings struct {
	// FailFirst is how many embeddings calls, counted from the start, are
	// answered Status (500 by default) instead; Server.FailEmbeddings sets
	// the same at run time.
	FailFirst int `yaml:"fail_first"`
	// Status is the status of those failures (≥ 400).
	Status int `yaml:"status"`
	// RetryAfter is sent with them, in seconds, when set.
	RetryAfter int `yaml:"retry_after"`
	// OmitUsage leaves usage out of the answers.
	OmitUsage bool `yaml:"omit_usage"`
	// Latency is waited before each answer.
	Latency time.Duration `yaml:"latency"`
}

// Answer is one scripted reply.
type Answer struct {
	// Match is a regexp on the last user message; empty means the answer is
	// handed out in order instead.
	Match string `yaml:"match"`
	// Content is the reply: text and tool_use blocks.
	Content []Block `yaml:"content"`
	// StopReason defaults to tool_use when Content calls a tool, else
	// end_turn; with no Content it makes an empty answer.
	StopReason string `yaml:"stop_reason"`
	// Usage is reported as given; without it the fake estimates four
	// characters per token, like a real upstream would count.
	Usage *Usage `yaml:"usage"`
	// OmitUsage leaves every usage figure out of the reply.
	OmitUsage bool `yaml:"omit_usage"`
	// ChunkSize is the characters per streamed delta (default 16).
	ChunkSize int `yaml:"chunk_size"`
	// Latency is waited before the response headers, ChunkLatency before
	// each streamed delta.
	Latency      time.Duration `yaml:"latency"`
	ChunkLatency time.Duration `yaml:"chunk_latency"`
	// HoldUntil, when set, pauses the stream after its first HoldAfter
	// deltas until a file exists at that path, so a test can act on a
	// reply it has caught mid-stream however slow the machine is.
	HoldUntil string `yaml:"hold_until"`
	HoldAfter int    `yaml:"hold_after"`
	// Fault replaces or breaks the reply.
	Fault *Fault `yaml:"fault"`

	re *regexp.Regexp
}

// Block is a text block (Text) or a tool call (ToolUse).
type Block struct {
	Text    string   `yaml:"text"`
	ToolUse *ToolUse `yaml:"tool_use"`
}

// ToolUse is a scripted tool call; the id is generated when empty.
type ToolUse struct {
	ID    string         `yaml:"id"`
	Name  string         `yaml:"name"`
	Input map[string]any `yaml:"input"`
}

// Usage is the token figures an answer reports.
type Usage struct {
	InputTokens              int64 `yaml:"input_tokens"`
	OutputTokens             int64 `yaml:"output_tokens"`
	CacheReadInputTokens     int64 `yaml:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `yaml:"cache_creation_input_tokens"`
}

// Fault kinds.
const (
	// FaultStatus answers Status (429, 500, 529…) with an error body before
	// any byte of a reply, with Retry-After when RetryAfter is set.
	FaultStatus = "status"
	// FaultErrorEvent streams After events, then an error event of the
	// type of Status (500 → api_error, 529 → overloaded_error), and ends.
	FaultErrorEvent = "error_event"
	// FaultDisconnect sends After events (a streamed reply) or half the body
	// (a JSON reply), then drops the connection.
	FaultDisconnect = "disconnect"
	// FaultMalformed answers 200 with a body (or a first event) that is not JSON.
	FaultMalformed = "malformed"
)

// Fault breaks an answer.
type Fault struct {
	Kind       string `yaml:"kind"`
	Status     int    `yaml:"status"`
	RetryAfter int    `yaml:"retry_after"`
	Message    string `yaml:"message"`
	After      int    `yaml:"after"`
}

// Load reads a script from a JSON or YAML file.
func Load(path string) (*Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fakellm: load: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("fakellm: load %s: %w", path, err)
	}
	return s, nil
}

// Parse reads a script from JSON or YAML and checks it.
func Parse(b []byte) (*Script, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("fakellm: parse: %w", err)
	}
	if err := s.compile(); err != nil {
		return nil, err
	}
	return &s, nil
}

// MustParse is Parse for scripts known to be valid; it panics otherwise.
func MustParse(src string) *Script {
	s, err := Parse([]byte(src))
	if err != nil {
		panic(err)
	}
	return s
}

func (s *Script) compile() error {
	if len(s.Answers) == 0 {
		return errors.New("fakellm: script has no answers")
	}
	if e := s.Embeddings; e != nil {
		if e.FailFirst < 0 || e.RetryAfter < 0 || e.Latency < 0 || (e.Status != 0 && e.Status < 400) {
			return errors.New("fakellm: embeddings: fail_first, retry_after and latency must not be negative, status must be ≥ 400")
		}
	}
	for i := range s.Answers {
		a := &s.Answers[i]
		if a.Match != "" {
			re, err := regexp.Compile(a.Match)
			if err != nil {
				return fmt.Errorf("fakellm: answer %d: match: %w", i, err)
			}
			a.re = re
		}
		if a.ChunkSize < 0 || a.Latency < 0 || a.ChunkLatency < 0 {
			return fmt.Errorf("fakellm: answer %d: chunk_size and latencies must not be negative", i)
		}
		if a.HoldAfter < 0 || (a.HoldAfter > 0 && a.HoldUntil == "") {
			return fmt.Errorf("fakellm: answer %d: hold_after must not be negative and needs hold_until", i)
		}
		for j, b := range a.Content {
			if (b.Text == "") == (b.ToolUse == nil) {
				return fmt.Errorf("fakellm: answer %d: content %d: set exactly one of text and tool_use", i, j)
			}
			if b.ToolUse != nil && b.ToolUse.Name == "" {
				return fmt.Errorf("fakellm: answer %d: content %d: tool_use needs a name", i, j)
			}
		}
		if f := a.Fault; f != nil {
			switch f.Kind {
			case FaultStatus, FaultErrorEvent:
				if f.Status < 400 {
					return fmt.Errorf("fakellm: answer %d: fault %s needs a status ≥ 400", i, f.Kind)
				}
			case FaultDisconnect, FaultMalformed:
			default:
				return fmt.Errorf("fakellm: answer %d: unknown fault kind %q", i, f.Kind)
			}
		}
		// An answer with no content is allowed when it names its stop
		// reason: real models do answer "content": [] now and then.
		if len(a.Content) == 0 && a.Fault == nil && a.StopReason == "" {
			return fmt.Errorf("fakellm: answer %d: no content and no fault (set stop_reason for an empty answer)", i)
		}
	}
	return nil
}

func (a *Answer) stopReason() string {
	if a.StopReason != "" {
		return a.StopReason
	}
	for _, b := range a.Content {
		if b.ToolUse != nil {
			return "tool_use"
		}
	}
	return "end_turn"
}

func (a *Answer) chunkSize() int {
	if a.ChunkSize > 0 {
		return a.ChunkSize
	}
	return 16
}

// chunks splits s into pieces of at most n runes.
func chunks(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	if len(r) > 0 {
		out = append(out, string(r))
	}
	return out
}
