package api

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/fasthttp/websocket"
	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/balletplanner/ballet/store"
)

// rpcCodec turns frames of one subprotocol into JSON documents and back.
// Everything between the socket and the methods is JSON, so that both
// subprotocols are decoded by the one strict decoder of the REST api.
type rpcCodec interface {
	// frameType is the websocket message type of the subprotocol.
	frameType() int
	// toJSON converts an incoming frame; an error is a parse error.
	toJSON(frame []byte) ([]byte, error)
	// fromJSON converts an outgoing JSON document to a frame.
	fromJSON(doc []byte) ([]byte, error)
	// encode encodes an outgoing value as a frame.
	encode(v any) ([]byte, error)
	// output encodes a planner.output notification of a subscription.
	output(sub string, o store.Output) ([]byte, error)
}

// jsonCodec is ballet.v1.json: text frames holding JSON.
type jsonCodec struct{}

func (jsonCodec) frameType() int                      { return websocket.TextMessage }
func (jsonCodec) toJSON(frame []byte) ([]byte, error) { return frame, nil }
func (jsonCodec) fromJSON(doc []byte) ([]byte, error) { return doc, nil }
func (jsonCodec) encode(v any) ([]byte, error)        { return stdjson.Marshal(v) }

// output writes the notification around the output's own encoding, with
// the subscription as the first member of params.
func (jsonCodec) output(sub string, o store.Output) ([]byte, error) {
	b, err := stdjson.Marshal(o)
	if err != nil {
		return nil, err
	}
	q, _ := stdjson.Marshal(sub)
	frame := make([]byte, 0, len(outputPrefix)+len(q)+len(b)+2)
	frame = append(append(append(frame, outputPrefix...), q...), ',')
	frame = append(append(frame, b[1:]...), '}')
	return frame, nil
}

const outputPrefix = `{"jsonrpc":"2.0","method":"planner.output","params":{"subscription":`

// msgpackCodec is ballet.v1.msgpack: binary frames holding MessagePack.
// Maps must have string keys, given once; binary, extension and
// non-finite values have no JSON twin and are refused.
type msgpackCodec struct{}

func (msgpackCodec) frameType() int { return websocket.BinaryMessage }

// maxMsgpackDepth bounds the nesting of an incoming MessagePack value.
const maxMsgpackDepth = 64

func (msgpackCodec) toJSON(frame []byte) ([]byte, error) {
	dec := msgpack.NewDecoder(bytes.NewReader(frame))
	var out bytes.Buffer
	enc := jsontext.NewEncoder(&out, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if err := msgpackValue(dec, enc, 0); err != nil {
		return nil, fmt.Errorf("malformed MessagePack: %w", err)
	}
	if _, err := dec.PeekCode(); err == nil {
		return nil, errors.New("malformed MessagePack: unexpected data after the first value")
	}
	return out.Bytes(), nil
}

// msgpackValue copies one MessagePack value from dec to enc.
func msgpackValue(dec *msgpack.Decoder, enc *jsontext.Encoder, depth int) error {
	if depth > maxMsgpackDepth {
		return fmt.Errorf("nested deeper than %d", maxMsgpackDepth)
	}
	c, err := dec.PeekCode()
	if err != nil {
		return errors.New("unexpected end of input")
	}
	switch {
	case c == msgpcode.Nil:
		_ = dec.DecodeNil()
		return enc.WriteToken(jsontext.Null)
	case c == msgpcode.True || c == msgpcode.False:
		b, err := dec.DecodeBool()
		if err != nil {
			return err
		}
		return enc.WriteToken(jsontext.Bool(b))
	case msgpcode.IsFixedNum(c) || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64:
		n, err := dec.DecodeInt64()
		if err != nil {
			return err
		}
		return enc.WriteToken(jsontext.Int(n))
	case c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64:
		n, err := dec.DecodeUint64()
		if err != nil {
			return err
		}
		return enc.WriteToken(jsontext.Uint(n))
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := dec.DecodeFloat64()
		if err != nil {
			return err
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("NaN and infinities have no JSON form")
		}
		return enc.WriteToken(jsontext.Float(f))
	case msgpcode.IsString(c):
		s, err := dec.DecodeString()
		if err != nil {
			return err
		}
		return enc.WriteToken(jsontext.String(s))
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		if err := enc.WriteToken(jsontext.BeginArray); err != nil {
			return err
		}
		for range n {
			if err := msgpackValue(dec, enc, depth+1); err != nil {
				return err
			}
		}
		return enc.WriteToken(jsontext.EndArray)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := dec.DecodeMapLen()
		if err != nil {
			return err
		}
		if err := enc.WriteToken(jsontext.BeginObject); err != nil {
			return err
		}
		for range n {
			kc, err := dec.PeekCode()
			if err != nil || !msgpcode.IsString(kc) {
				return errors.New("map keys must be strings")
			}
			k, err := dec.DecodeString()
			if err != nil {
				return err
			}
			if err := enc.WriteToken(jsontext.String(k)); err != nil {
				return fmt.Errorf("key %q: %w", k, err)
			}
			if err := msgpackValue(dec, enc, depth+1); err != nil {
				return err
			}
		}
		return enc.WriteToken(jsontext.EndObject)
	}
	return fmt.Errorf("type 0x%02x has no JSON form (binary, extension)", c)
}

// encode encodes a notification whose params are a JSON document already
// decoded (outputParams) straight as MessagePack; anything else through
// its JSON form, so that both subprotocols carry the same values.
func (m msgpackCodec) encode(v any) ([]byte, error) {
	if n, ok := v.(rpcNotification); ok {
		if p, ok := n.Params.(map[string]any); ok {
			b, err := msgpack.Marshal(map[string]any{"jsonrpc": n.JSONRPC, "method": n.Method, "params": msgpackNumbers(p)})
			if err != nil {
				return nil, fmt.Errorf("rpc: encode as msgpack: %w", err)
			}
			return b, nil
		}
	}
	doc, err := stdjson.Marshal(v)
	if err != nil {
		return nil, err
	}
	return m.fromJSON(doc)
}

func (m msgpackCodec) output(sub string, o store.Output) ([]byte, error) {
	return m.encode(rpcNotification{JSONRPC: "2.0", Method: "planner.output", Params: outputParams(sub, o)})
}

// fromJSON re-encodes an outgoing JSON document as MessagePack: objects as
// maps, integers as integers, other numbers as float64.
func (msgpackCodec) fromJSON(doc []byte) ([]byte, error) {
	dec := stdjson.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("rpc: re-encode as msgpack: %w", err)
	}
	b, err := msgpack.Marshal(msgpackNumbers(v))
	if err != nil {
		return nil, fmt.Errorf("rpc: re-encode as msgpack: %w", err)
	}
	return b, nil
}

func msgpackNumbers(v any) any {
	switch x := v.(type) {
	case stdjson.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = msgpackNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = msgpackNumbers(e)
		}
	}
	return v
}

// rpcEnvelope is an incoming request or notification, read strictly.
type rpcEnvelope struct {
	JSONRPC string         `json:"jsonrpc"`
	ID      jsontext.Value `json:"id,omitzero"`
	Method  string         `json:"method"`
	Params  jsontext.Value `json:"params,omitzero"`
}

// rpcRequest is a decoded envelope: HasID is false for a notification.
type rpcRequest struct {
	ID     int64
	HasID  bool
	Method string
	Params jsontext.Value
}

// rpcFrameError is a frame that is not a request: Code is -32700 or
// -32600; ID is the request's id when it could be read.
type rpcFrameError struct {
	Code    int
	Message string
	ID      *int64
}

// parseRequest reads one JSON document as a JSON-RPC 2.0 request.
func parseRequest(doc []byte) (rpcRequest, *rpcFrameError) {
	if !jsontext.Value(doc).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)) {
		return rpcRequest{}, &rpcFrameError{Code: RPCParseError, Message: "parse error: the frame is not one JSON value"}
	}
	if k := bytes.TrimLeft(doc, " \t\r\n"); len(k) > 0 && k[0] == '[' {
		return rpcRequest{}, &rpcFrameError{Code: RPCInvalidRequest, Message: "invalid request: batches are not supported; send one request per frame"}
	}
	var env rpcEnvelope
	if err := json.Unmarshal(doc, &env, strictJSON); err != nil {
		return rpcRequest{}, &rpcFrameError{Code: RPCInvalidRequest, Message: "invalid request: " + describeJSONError(err), ID: rescueID(doc)}
	}
	req := rpcRequest{Method: env.Method, Params: env.Params}
	if env.ID != nil {
		id, err := strconv.ParseInt(string(env.ID), 10, 64)
		if env.ID.Kind() != '0' || err != nil {
			return req, &rpcFrameError{Code: RPCInvalidRequest, Message: "invalid request: id must be an integer, got " + truncate(string(env.ID), 40)}
		}
		req.ID, req.HasID = id, true
	}
	fail := func(msg string) (rpcRequest, *rpcFrameError) {
		var id *int64
		if req.HasID {
			id = &req.ID
		}
		return req, &rpcFrameError{Code: RPCInvalidRequest, Message: "invalid request: " + msg, ID: id}
	}
	if env.JSONRPC != "2.0" {
		return fail(`jsonrpc must be "2.0"`)
	}
	if env.Method == "" {
		return fail("method is required")
	}
	if env.Params != nil && env.Params.Kind() != '{' && env.Params.Kind() != 'n' {
		return fail("params must be an object")
	}
	return req, nil
}

// rescueID reads the integer id of a request that is otherwise invalid.
func rescueID(doc []byte) *int64 {
	var v struct {
		ID jsontext.Value `json:"id"`
	}
	if json.Unmarshal(doc, &v, jsontext.AllowDuplicateNames(true)) != nil || v.ID.Kind() != '0' {
		return nil
	}
	id, err := strconv.ParseInt(string(v.ID), 10, 64)
	if err != nil {
		return nil
	}
	return &id
}

// decodeParams reads params into v strictly, naming the field of any
// error; absent or null params read as {}.
func decodeParams(params jsontext.Value, v any) error {
	if params == nil || params.Kind() == 'n' {
		params = jsontext.Value("{}")
	}
	if err := json.Unmarshal(params, v, strictJSON); err != nil {
		return store.Errorf(store.CodeInvalid, "params: %s", describeJSONError(err))
	}
	if path, ok := findNUL(params); ok {
		return store.Errorf(store.CodeInvalid, "params: field %s: must not contain NUL characters", path)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
