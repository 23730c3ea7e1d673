package tasks

import (
	"fmt"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/balletplanner/ballet/store"
)

// outputOptions encode a published output as encoding/json reads
// store.Output's tags (omitempty leaves out zero numbers and false too),
// keeping duplicate names in its raw JSON and writing invalid UTF-8 as
// U+FFFD, as encoding/json does. The subscribers (the api, `ballet chat`,
// the bench) decode it with encoding/json.
var outputOptions = jsonv2.JoinOptions(
	jsonv1.OmitEmptyWithLegacySemantics(true),
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
)

// encodeOutput returns o as JSON, one object without a trailing newline
// (publishText appends to it). Every output a turn publishes is encoded,
// the text deltas on the hot path: o is marshaled from a pooled copy, so
// that the JSON is the one allocation (o itself stays where it is).
func encodeOutput(o *store.Output) ([]byte, error) {
	c := outputCopies.Get().(*store.Output)
	*c = *o
	b, err := jsonv2.Marshal(c, outputOptions)
	*c = store.Output{}
	outputCopies.Put(c)
	if err != nil {
		return nil, fmt.Errorf("tasks: encode output: %w", err)
	}
	return b, nil
}

var outputCopies = sync.Pool{New: func() any { return new(store.Output) }}
