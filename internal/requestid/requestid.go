// Package requestid carries the id of the request that caused some work:
// the api's access log id, kept in a context through a turn and sent on
// to the gateway as X-Request-Id, which logs it as caller_request_id.
package requestid

import "context"

// Header carries the request id between processes.
const Header = "X-Request-Id"

// MaxLen bounds a request id taken from a caller.
const MaxLen = 128

// key keys the request id in a context.
type key struct{}

// With returns ctx carrying the request id; the gateway client sends it as
// X-Request-Id. An empty id clears the one ctx carried.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// From is the request id ctx carries, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}

// Valid reports whether id may be taken from a caller as it is: 1 to
// MaxLen characters of letters, digits and - _ . : only, so that it is
// safe in a header and a log line.
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen {
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
