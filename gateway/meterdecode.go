package gateway

import (
	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// encodingJSON are the options under which go-json-experiment decodes as
// encoding/json does (case-insensitive names, duplicates and invalid UTF-8
// allowed, nulls and merges as v1 has them, the same errors): the hot
// paths decode with the library's faster decoder yet keep the answers of
// the encoding/json decode they replace.
var encodingJSON = jsonv1.DefaultOptionsV1()

// decodeMeterEvent decodes an event's data into e as json.Unmarshal would,
// reporting whether it succeeded (the meter reads nothing of an event that
// does not decode).
func decodeMeterEvent(data []byte, e *meterEvent) bool {
	return jsonv2.Unmarshal(data, e, encodingJSON) == nil
}

// observeDecoded is what observe does with the event it decoded.
func (m *meter) observeDecoded(e *meterEvent) {
	switch e.Type {
	case "message_start":
		m.apply(e.Message.Usage)
	case "message_delta":
		if e.Usage != nil {
			m.sawDelta = true
		}
		m.apply(e.Usage)
		if e.Delta.StopReason != "" {
			m.stopReason = e.Delta.StopReason
		}
	case "content_block_delta":
		m.outChars += len(e.Delta.Text) + len(e.Delta.PartialJSON) + len(e.Delta.Thinking)
	case "error":
		if e.Error != nil {
			m.errType, m.errMessage = e.Error.Type, e.Error.Message
		}
	}
}

// decodeRequestHead reads the model, max_tokens and stream of a Messages
// request body as json.Unmarshal into requestHead would, validating the
// rest (the messages) without decoding it. ok is false where
// json.Unmarshal would fail; the caller then asks encoding/json for its
// error text.
func decodeRequestHead(raw []byte) (head requestHead, ok bool) {
	if scanRequestHead(raw, &head) {
		return head, true
	}
	head = requestHead{}
	if jsonv2.Unmarshal(raw, &head, encodingJSON) != nil {
		return requestHead{}, false
	}
	return head, true
}

// requestHeadNames are the members scanRequestHead reads.
var requestHeadNames = []string{"model", "max_tokens", "stream"}

// scanRequestHead reads model, max_tokens and stream in one pass over a
// request body, validating the rest, where the body is of the everyday
// shape (names as the API writes them, a plain model string, an integer
// max_tokens, a true or false stream); it returns false for anything else,
// and decodeRequestHead decodes the body instead.
func scanRequestHead(raw []byte, head *requestHead) bool {
	s := scanner{data: raw}
	return s.document(func(name int) bool {
		switch name {
		case 0:
			return s.plainString(&head.Model)
		case 1:
			n, ok := s.integer()
			head.MaxTokens = int(n)
			return ok && int64(head.MaxTokens) == n
		default:
			switch {
			case s.literal("true"):
				head.Stream = true
			case s.literal("false"):
				head.Stream = false
			default:
				return false
			}
			return true
		}
	}, requestHeadNames)
}
