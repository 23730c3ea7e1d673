// Package jsontest compares JSON documents as values in tests: two
// encoders may write the same value with different bytes (escapes, member
// order, number spelling).
package jsontest

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// Same fails t unless got and want hold the same JSON value: the same
// members (an omitted one is not a zero one), numbers compared as written.
func Same(t testing.TB, got, want []byte) {
	t.Helper()
	g, err := Decode(got)
	if err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	w, err := Decode(want)
	if err != nil {
		t.Fatalf("decode the reference %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("not the same value:\n got %s\nwant %s", got, want)
	}
}

// ErrTrailing is Decode's error for data after the value.
var ErrTrailing = errors.New("data after the value")

// Decode decodes one JSON value, numbers as json.Number, refusing data
// after it.
func Decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, ErrTrailing
	}
	return v, nil
}
