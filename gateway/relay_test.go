package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// longStream is an Anthropic stream of many events written the ways an
// upstream may write them: pings, a comment, a CRLF event, escapes and
// multi-byte text, a tool call's partial JSON; then tail.
func longStream(deltas int, tail string) []byte {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_long\",\"type\":\"message\",\"role\":\"assistant\"," +
		"\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1234,\"cache_creation_input_tokens\":7," +
		"\"cache_read_input_tokens\":56,\"output_tokens\":1}}}\n\n")
	b.WriteString(": a comment the caller may ignore\n\n")
	b.WriteString("event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n")
	texts := []string{`plain words `, `a \"quote\" and a \\ backslash`, `line\nbreak\ttab`, `ünïcödé → 🎉`, `\u00e9\ud83c\udf89 escaped`, `</script>`}
	for i := range deltas {
		if i%100 == 0 {
			b.WriteString("event: ping\ndata: {\"type\": \"ping\"}\n\n")
		}
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"%s %d\"}}\n\n", texts[i%len(texts)], i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"search\",\"input\":{}}}\n\n")
	b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\": \\\"text\\\"\"}}\n\n")
	b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"}\"}}\n\n")
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	b.WriteString(tail)
	return []byte(b.String())
}

const longStreamEnd = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":4321}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// chunkedUpstream serves stream in pieces of random sizes, flushing each,
// so that events straddle the gateway's reads.
func chunkedUpstream(t *testing.T, stream []byte) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		rnd := rand.New(rand.NewPCG(1, 2))
		for rest := stream; len(rest) > 0; {
			n := min(1+rnd.IntN(700), len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				return
			}
			_ = rc.Flush()
			rest = rest[n:]
		}
	}))
	t.Cleanup(up.Close)
	return up
}

func TestRelayPassesAStreamOnByteForByteAndMetersItExactly(t *testing.T) {
	t.Parallel()
	stream := longStream(3000, longStreamEnd)
	up := chunkedUpstream(t, stream)
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(""), withConfig(func(c *Config) { c.AllowedUpstreams = append(c.AllowedUpstreams, up.URL) }))
	e.putCredential(t, "", store.ProviderAnthropic, up.URL)

	resp, body := e.post(t, e.token(t), hello(true))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("request-id") == "" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if !bytes.Equal(body, stream) {
		i := 0
		for i < min(len(body), len(stream)) && body[i] == stream[i] {
			i++
		}
		t.Fatalf("relayed %d bytes, upstream sent %d; first difference at %d: %q", len(body), len(stream), i, body[i:min(i+80, len(body))])
	}
	rows := e.usageRows(t, 1)
	want := store.Usage{Status: 200, InputTokens: 1234, OutputTokens: 4321, CacheReadTokens: 56, CacheWriteTokens: 7}
	if got := rows[0]; got.Status != want.Status || got.InputTokens != want.InputTokens || got.OutputTokens != want.OutputTokens ||
		got.CacheReadTokens != want.CacheReadTokens || got.CacheWriteTokens != want.CacheWriteTokens || got.Estimated ||
		got.RequestID != resp.Header.Get("request-id") {
		t.Fatalf("usage row = %+v, want %+v", got, want)
	}
	for typ, n := range map[string]float64{"input": 1234, "output": 4321, "cache_read": 56, "cache_write": 7} {
		if got := e.counter(t, "ballet_llm_tokens_total", map[string]string{"token_type": typ}); got != n {
			t.Errorf("ballet_llm_tokens_total{token_type=%q} = %v, want %v", typ, got, n)
		}
	}
}

func TestRelayRewritesAnErrorEventAtTheEndOfALongStream(t *testing.T) {
	t.Parallel()
	secret := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\\u0007 at 10.0.0.7\"},\"internal\":\"sk-leak\"}\n\n"
	prefix := longStream(500, "")
	up := chunkedUpstream(t, append(bytes.Clone(prefix), secret...))
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(""), withConfig(func(c *Config) { c.AllowedUpstreams = append(c.AllowedUpstreams, up.URL) }))
	e.putCredential(t, "", store.ProviderAnthropic, up.URL)

	_, body := e.post(t, e.token(t), hello(true))
	rest, ok := bytes.CutPrefix(body, prefix)
	if !ok {
		t.Fatalf("the events before the error were not relayed as they came:\n%.300s", body)
	}
	wantErr := "event: error\ndata: " + string(errorJSON(llm.ErrOverloaded, "busy  at 10.0.0.7")) + "\n\n"
	if string(rest) != wantErr {
		t.Fatalf("error event = %q, want %q", rest, wantErr)
	}
	if rows := e.usageRows(t, 1); rows[0].Status != 529 || rows[0].InputTokens != 1234 {
		t.Fatalf("usage row = %+v, want status 529 with the input metered", rows[0])
	}
}

// TestDeltaCharsMatchesDecoding checks the undecoded count of a
// content_block_delta against encoding/json's.
func TestDeltaCharsMatchesDecoding(t *testing.T) {
	t.Parallel()
	strs := []string{"", "a", "héllo", "🎉", "\x00\x1f", "\u2028", "a\"b\\c/d", "\xff\xfe", "\xed\xa0\x80", "tab\there", "</script>&"}
	rnd := rand.New(rand.NewPCG(3, 4))
	alphabet := []rune{'a', ' ', '"', '\\', '/', '\n', '\t', 0x01, 'é', '€', '🎉', 0x2028, utf8.RuneError}
	for range 300 {
		var sb strings.Builder
		for range rnd.IntN(40) {
			sb.WriteRune(alphabet[rnd.IntN(len(alphabet))])
		}
		strs = append(strs, sb.String())
	}
	raws := []string{
		// Written by hand: escapes json.Marshal does not use, surrogates, whitespace.
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\u00e9\ud83c\udf89\ud800x\udc00\/\b\f\r"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text": "spaced"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cut`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"bad \x escape"}}`,
		`not json`,
	}
	for _, s := range strs {
		for _, key := range []string{"text", "partial_json", "thinking"} {
			b, err := json.Marshal(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": key + "_delta", key: s}})
			if err != nil {
				t.Fatal(err)
			}
			raws = append(raws, string(b))
		}
	}
	for _, raw := range raws {
		if got, want := deltaChars([]byte(raw)), decodedDeltaChars([]byte(raw)); got != want {
			t.Errorf("deltaChars(%s) = %d, decoded %d", raw, got, want)
		}
	}
}
