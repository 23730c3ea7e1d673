package llm

import "context"

// RequestIDHeader carries the id of the request that caused a call: the
// api's access log id, sent on by a turn to the gateway, which logs it as
// caller_request_id.
const RequestIDHeader = "X-Request-Id"

// MaxRequestIDLen bounds a request id taken from a caller.
const MaxRequestIDLen = 128

// requestIDKey keys the request id in a context.
type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id; the Client sends it as
// X-Request-Id. An empty id clears the one ctx carried.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// ValidRequestID reports whether id may be taken from a caller as it is: 1
// to MaxRequestIDLen characters of letters, digits and - _ . : only, so that
// it is safe in a header and a log line.
func ValidRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}
