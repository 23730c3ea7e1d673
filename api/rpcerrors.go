package api

import "github.com/balletplanner/ballet/store"

// JSON-RPC error codes of the realtime API (SPEC §8).
const (
	RPCParseError      = -32700
	RPCInvalidRequest  = -32600
	RPCMethodNotFound  = -32601
	RPCInvalidParams   = -32602
	RPCInternal        = -32603
	RPCUnauthenticated = -32001
	RPCForbidden       = -32003
	RPCNotFound        = -32004
	RPCConflict        = -32009
	RPCResyncRequired  = -32010
)

// rpcCode maps each error code to its JSON-RPC code: the one table of the
// realtime API. Codes without a number of their own in SPEC §8 (unavailable,
// resource_exhausted) are -32603 with the code in data, so Ballet clients
// see a known number and ours can branch on data.code.
var rpcCode = map[store.Code]int{
	store.CodeInvalid:         RPCInvalidParams,
	store.CodeUnauthenticated: RPCUnauthenticated,
	store.CodeForbidden:       RPCForbidden,
	store.CodeNotFound:        RPCNotFound,
	store.CodeAlreadyExists:   RPCConflict,
	store.CodeConflict:        RPCConflict,
	store.CodeResyncRequired:  RPCResyncRequired,
	store.CodeExhausted:       RPCInternal,
	store.CodeUnavailable:     RPCInternal,
	store.CodeInternal:        RPCInternal,
}

// RPCError is a JSON-RPC 2.0 error object.
type RPCError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

// RPCErrorOf maps err to the JSON-RPC error a client is sent. data.code
// always names the error code; an unavailable error also carries
// data.retry_after (seconds), the twin of REST's Retry-After.
func RPCErrorOf(err error) RPCError {
	se := store.AsError(err)
	if se == nil {
		return RPCError{Code: RPCInternal, Message: "internal error", Data: map[string]any{"code": store.CodeInternal}}
	}
	code, ok := rpcCode[se.Code]
	if !ok {
		code = RPCInternal
	}
	data := map[string]any{"code": se.Code}
	for k, v := range se.Details {
		data[k] = v
	}
	if se.Code == store.CodeUnavailable {
		data["retry_after"] = int(store.UnavailableRetryAfter.Seconds())
	}
	return RPCError{Code: code, Message: se.Message, Data: data}
}
