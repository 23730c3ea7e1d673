package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/balletplanner/ballet/gateway/llm"
)

// errMalformed marks an upstream answer the gateway cannot read: 502.
var errMalformed = errors.New("malformed upstream response")

// maxUpstreamMessage caps, in characters, an upstream error message passed
// to the caller.
const maxUpstreamMessage = 500

// knownErrorTypes are the Anthropic error types passed on as they are; any
// other type is replaced by the one of the status.
var knownErrorTypes = map[string]bool{
	llm.ErrInvalidRequest: true, llm.ErrAuthentication: true, llm.ErrPermission: true, llm.ErrNotFound: true,
	llm.ErrTooLarge: true, llm.ErrRateLimit: true, llm.ErrAPI: true, llm.ErrOverloaded: true,
	"billing_error": true, "timeout_error": true,
}

// upstreamErrorBody turns an upstream's error answer into the Anthropic
// error the caller sees. Only a short message parsed from a provider-shaped
// JSON error ({"type":"error","error":{...}} or {"error":{"message":...}}
// or {"error":"..."}) passes; anything else becomes a generic message with
// the status, so that no upstream body reaches the caller as it is.
func upstreamErrorBody(provider string, status int, body []byte) []byte {
	typ, msg := parseUpstreamError(body)
	if !knownErrorTypes[typ] {
		typ = llm.ErrorTypeForStatus(status)
	}
	if msg == "" {
		msg = "upstream " + provider + " answered " + strconv.Itoa(status)
		if text := http.StatusText(status); text != "" {
			msg += " " + text
		}
	}
	return errorJSON(typ, msg)
}

// streamErrorBody rewrites the data of a streamed error event the same way;
// it returns the error type too, for the status to record.
func streamErrorBody(provider string, data []byte) (string, []byte) {
	typ, msg := parseUpstreamError(data)
	if !knownErrorTypes[typ] {
		typ = llm.ErrAPI
	}
	if msg == "" {
		msg = "upstream " + provider + " sent an error event"
	}
	return typ, errorJSON(typ, msg)
}

// parseUpstreamError reads the type and cleaned message of a
// provider-shaped JSON error; both are "" for any other body.
func parseUpstreamError(body []byte) (typ, msg string) {
	var e struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		return "", ""
	}
	var s string
	if json.Unmarshal(e.Error, &s) == nil { // {"error":"model not found"} (Ollama)
		return "", cleanMessage(s)
	}
	var d struct {
		Type    json.RawMessage `json:"type"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(e.Error, &d) != nil {
		return "", ""
	}
	if e.Type == "error" {
		_ = json.Unmarshal(d.Type, &typ) // OpenAI's type may be anything; only a string counts
	}
	return typ, cleanMessage(d.Message)
}

// cleanMessage makes an upstream message safe to show: valid UTF-8, control
// characters as spaces, at most maxUpstreamMessage characters.
func cleanMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return truncate(strings.TrimSpace(s), maxUpstreamMessage)
}

// truncate cuts s to at most n characters, marking a cut with "…".
func truncate(s string, n int) string {
	i, count := 0, 0
	for i = range s {
		if count == n {
			return s[:i] + "…"
		}
		count++
	}
	return s
}

func errorJSON(typ, msg string) []byte {
	b, _ := json.Marshal(llm.ErrorBody{Type: "error", Error: llm.ErrorDetail{Type: typ, Message: msg}})
	return b
}

// statusForErrorType is the inverse of llm.ErrorTypeForStatus, for error
// events inside a stream.
func statusForErrorType(typ string) int {
	switch typ {
	case llm.ErrInvalidRequest:
		return 400
	case llm.ErrAuthentication:
		return 401
	case llm.ErrPermission:
		return 403
	case llm.ErrNotFound:
		return 404
	case llm.ErrTooLarge:
		return 413
	case llm.ErrRateLimit:
		return 429
	case llm.ErrOverloaded:
		return 529
	}
	return 500
}
