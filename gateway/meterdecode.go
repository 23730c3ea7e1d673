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
