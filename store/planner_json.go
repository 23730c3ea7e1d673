package store

import (
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// A message's content ([]Block) and usage (MessageUsage) are jsonb columns,
// read for every message of a turn's history. pgx would decode them with
// encoding/json; blocksJSON and usageJSON decode them with jsonv2, straight
// from the row's bytes (pgtype.BytesScanner): about half the CPU and a
// quarter of the allocations (BenchmarkContentJSON). They are conversions
// of the fields themselves: scanMessage scans into (*blocksJSON)(&m.Content).
// Writes stay with pgx's encoding/json, which is as fast here.

// columnOptions read the columns as encoding/json reads the types' tags:
// names match case-insensitively, duplicate names are kept (the last wins)
// and invalid UTF-8 becomes U+FFFD. Only these three, not all of
// jsonv1.DefaultOptionsV1 as the gateway's meter: the rest changes nothing
// for these types (TestBlocksJSONReadsAsEncodingJSON,
// TestUsageJSONReadsAsEncodingJSON) and took a text message's decode from
// 0.35× encoding/json's time to 0.55×.
var columnOptions = jsonv2.JoinOptions(
	jsonv2.MatchCaseInsensitiveNames(true),
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
)

// blocksJSON is a message's content as its jsonb column holds it.
type blocksJSON []Block

// ScanBytes decodes the column; src is the driver's memory, and nothing of
// it is kept (a tool input is copied).
func (b *blocksJSON) ScanBytes(src []byte) error {
	*b = nil
	if src == nil {
		return nil
	}
	if err := jsonv2.Unmarshal(src, (*[]Block)(b), columnOptions); err != nil {
		return fmt.Errorf("store: decode content: %w", err)
	}
	return nil
}

// usageJSON is a message's usage as its jsonb column holds it.
type usageJSON MessageUsage

// ScanBytes decodes the column.
func (u *usageJSON) ScanBytes(src []byte) error {
	*u = usageJSON{}
	if src == nil {
		return nil
	}
	if err := jsonv2.Unmarshal(src, (*MessageUsage)(u), columnOptions); err != nil {
		return fmt.Errorf("store: decode usage: %w", err)
	}
	return nil
}
