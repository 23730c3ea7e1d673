package tasks

import (
	"fmt"

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
// (publishText appends to it).
func encodeOutput(o *store.Output) ([]byte, error) {
	b, err := jsonv2.Marshal(o, outputOptions)
	if err != nil {
		return nil, fmt.Errorf("tasks: encode output: %w", err)
	}
	return b, nil
}
