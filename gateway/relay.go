package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/balletplanner/ballet/gateway/internal/sse"
	"github.com/balletplanner/ballet/gateway/llm"
)

// relay forwards a stream and returns the status to record. Events pass
// as the upstream framed them; only those that carry usage or an error
// (message_start, message_delta, error) are decoded, and the length of a
// content_block_delta's text is read without decoding the rest. An error
// event is rewritten (streamErrorBody): no upstream error reaches the
// caller as it came. What has arrived is flushed at once, in one write for
// all the events one upstream read brought. Once the first byte went out
// nothing is retried: a broken upstream is reported in the stream as an
// error event.
//
// With endsAtOnce (the handler returns right after the relay, with no
// round trip to make), a message_stop that came with the end of the
// upstream's answer is not flushed on its own: net/http sends it with the
// end of the response, in one write instead of two.
func (s *Server) relay(ctx context.Context, w http.ResponseWriter, provider string, ans *answer, m *meter, endsAtOnce bool) int {
	defer ans.src.close()
	h := w.Header()
	// Shared values, never modified: WriteHeader copies the header.
	h["Content-Type"] = eventStream
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = noBuffering
	h["Date"] = httpDate(time.Now()) // what net/http would set, formatted once a second
	w.WriteHeader(http.StatusOK)
	out := sse.NewWriter(w)
	defer out.Release()
	ev := ans.first
	for {
		var err error
		if ev.Name == "error" {
			e := sse.Event{Name: ev.Name}
			_, e.Data = streamErrorBody(provider, ev.Data())
			m.observe(e)
			err = out.Append(e)
		} else {
			m.observeRaw(ev)
			err = out.WriteRaw(ev.Bytes)
		}
		// Nothing follows message_stop or an error event: stop reading, so
		// that a caller who leaves at once is not recorded as gone.
		stopped := ev.Name == "message_stop" || ev.Name == "error"
		lastWithEnd := ev.Name == "message_stop" && endsAtOnce && ans.src.ended()
		switch {
		case err != nil:
		case lastWithEnd:
			err = out.WriteOut()
		case stopped || !ans.src.buffered():
			err = out.Flush()
		}
		if err != nil {
			return statusClientClosed
		}
		if stopped {
			break
		}
		ev, err = ans.src.next()
		if errors.Is(err, io.EOF) && m.errType != "" {
			break
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return statusClientClosed
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		out.Write(sse.Event{Name: "error", Data: errorJSON(llm.ErrAPI, "upstream stream broke off: "+err.Error())}) //nolint:errcheck
		return http.StatusBadGateway
	}
	if m.errType != "" {
		return statusForErrorType(m.errType)
	}
	return http.StatusOK
}

// The stream's header values (never modified).
var (
	noCache     = []string{"no-cache"}
	noBuffering = []string{"no"}
)

// observeRaw meters an undecoded event: only those that can carry usage,
// a stop reason or an error are read (message_start and message_delta,
// one or two per call, by scanMeterEvent, or decodeMeterEvent where the
// scan leaves one to a decoder); a content_block_delta counts the
// characters of its text for the estimate.
func (m *meter) observeRaw(ev sse.Raw) {
	switch ev.Name {
	case "content_block_delta":
		m.outChars += deltaChars(ev.Data())
	case "message_start", "message_delta":
		var s scannedEvent
		if scanMeterEvent(ev.Data(), &s) {
			m.observeScanned(&s)
			return
		}
		var e meterEvent
		if decodeMeterEvent(ev.Data(), &e) {
			m.observeDecoded(&e)
		}
	case "error", "":
		m.observe(ev.Event())
	}
}

// deltaKeys are the members of a content_block_delta's delta whose length
// counts, quoted as the Messages API writes them before their colon.
var deltaKeys = [3][]byte{[]byte(`"text"`), []byte(`"partial_json"`), []byte(`"thinking"`)}

// deltaChars is the length in bytes of the decoded text, partial_json and
// thinking of a content_block_delta's data, read without decoding the
// event: the first member of each name whose string follows its colon
// at once counts. A quote inside a JSON string is escaped, so `"text":"`
// can only be a member's name; data written another way is decoded.
//
// One pass finds them: at each colon it looks at the name before it, and
// it skips the strings it counts.
func deltaChars(data []byte) int {
	n := 0
	var seen [len(deltaKeys)]bool
	found := false
	for i := 0; ; {
		c := bytes.IndexByte(data[i:], ':')
		if c < 0 {
			break
		}
		c += i
		i = c + 1
		if i >= len(data) || data[i] != '"' {
			continue
		}
		k := deltaKeyBefore(data[:c])
		if k < 0 || seen[k] {
			continue
		}
		l, end, ok := jsonStringLen(data[i+1:])
		if !ok {
			return decodedDeltaChars(data)
		}
		n, found, seen[k] = n+l, true, true
		i += 1 + end
	}
	if !found {
		return decodedDeltaChars(data)
	}
	return n
}

// deltaKeyBefore is the index in deltaKeys of the quoted name b ends
// with, -1 for none.
func deltaKeyBefore(b []byte) int {
	for k, key := range deltaKeys {
		if bytes.HasSuffix(b, key) {
			return k
		}
	}
	return -1
}

func decodedDeltaChars(data []byte) int {
	var e struct {
		Delta *struct {
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			Thinking    string `json:"thinking"`
		} `json:"delta"`
	}
	if json.Unmarshal(data, &e) != nil || e.Delta == nil {
		return 0
	}
	return len(e.Delta.Text) + len(e.Delta.PartialJSON) + len(e.Delta.Thinking)
}

// jsonStringLen is the length in bytes of the JSON string that b starts
// with (after its opening quote) once decoded as encoding/json decodes it:
// invalid UTF-8 and lone surrogates become U+FFFD. end is the index in b
// just past its closing quote. ok is false for a string that is not valid
// JSON or not whole.
func jsonStringLen(b []byte) (n, end int, ok bool) {
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return n, i + 1, true
		case c < 0x20:
			return 0, 0, false
		case c < utf8.RuneSelf && c != '\\':
			n++
			i++
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				n += utf8.RuneLen(utf8.RuneError)
			} else {
				n += size
			}
			i += size
		default: // an escape
			if i+1 >= len(b) {
				return 0, 0, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				n++
				i += 2
			case 'u':
				r, ok := hex4(b[i+2:])
				if !ok {
					return 0, 0, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r2, ok := hex4(b[min(i+2, len(b)):]); ok && i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							n += utf8.RuneLen(dec)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				n += utf8.RuneLen(r)
			default:
				return 0, 0, false
			}
		}
	}
	return 0, 0, false
}

// hex4 reads the four hex digits b starts with.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(v), err == nil
}
