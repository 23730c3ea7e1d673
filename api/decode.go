package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// decode reads the JSON body into v strictly: unknown fields, trailing data
// and wrong types are invalid_argument errors that name the field.
func decode(c *fiber.Ctx, v any) error {
	return decodeJSON(c.Body(), v)
}

// decodeJSON is decode over raw bytes.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return store.Errorf(store.CodeInvalid, "request body: expected a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return store.Errorf(store.CodeInvalid, "request body: %s", describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return store.Errorf(store.CodeInvalid, "request body: unexpected data after the JSON object")
	}
	return nil
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return "expected a JSON object"
		}
		return "field " + field + ": must be " + jsonKind(te.Type.Kind().String()) + ", got " + te.Value
	case errors.As(err, &se):
		return "malformed JSON: " + se.Error()
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of input"
	}
	return err.Error()
}

func jsonKind(k string) string {
	switch k {
	case "int", "int32", "int64", "uint", "uint32", "uint64", "float64", "float32":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return k
}
