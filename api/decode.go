package api

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// strictJSON is how every body is read: keys match the documented names
// exactly (no case folding), a key given twice is refused, and so is one
// that no field has. Invalid UTF-8 is refused too (the JSON v2 default).
var strictJSON = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
)

// decode reads the JSON body into v strictly: unknown, duplicate or
// wrongly cased keys, trailing data, wrong types and NUL characters are
// invalid_argument errors that name the field.
func decode(c *fiber.Ctx, v any) error {
	return decodeJSON(c.Body(), v)
}

// decodeOptional is decode for a body that may be left out: an empty body
// leaves v as it is; anything else must be what decode accepts.
func decodeOptional(c *fiber.Ctx, v any) error {
	if len(bytes.TrimSpace(c.Body())) == 0 {
		return nil
	}
	return decode(c, v)
}

// decodeJSON is decode over raw bytes.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return store.Errorf(store.CodeInvalid, "request body: expected a JSON object")
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body), strictJSON)
	if err := json.UnmarshalDecode(dec, v, strictJSON); err != nil {
		return store.Errorf(store.CodeInvalid, "request body: %s", describeJSONError(err))
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return store.Errorf(store.CodeInvalid, "request body: unexpected data after the JSON object")
	}
	if path, ok := findNUL(body); ok {
		return store.Errorf(store.CodeInvalid, "request body: field %s: must not contain NUL characters", path)
	}
	return nil
}

// findNUL returns the path of the first string (key or value) of a valid
// JSON document that holds a NUL character, which Postgres text cannot
// store. JSON can only carry one escaped, so most bodies are passed over
// without being read twice.
func findNUL(body []byte) (string, bool) {
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return "", false
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return "", false
		}
		if tok.Kind() == '"' && strings.ContainsRune(tok.String(), 0) {
			path := fieldPath(dec.StackPointer())
			if strings.ContainsRune(path, 0) {
				path = strconv.Quote(path)
			}
			return path, true
		}
	}
}

// describeJSONError says what is wrong with a body in the words the api
// has always used, naming the field as a path (operations[0].create.title).
func describeJSONError(err error) string {
	var se *json.SemanticError
	var ye *jsontext.SyntacticError
	switch {
	case errors.As(err, &se):
		path := fieldPath(se.JSONPointer)
		switch {
		case errors.Is(se.Err, json.ErrUnknownName):
			return "unknown field " + strconv.Quote(se.JSONPointer.LastToken()) + within(se.JSONPointer.Parent())
		case path == "":
			return "expected a JSON object"
		case se.JSONKind == '0' && isInteger(se.GoType):
			if errors.Is(se.Err, strconv.ErrRange) {
				return "field " + path + ": out of range, got " + string(se.JSONValue)
			}
			return "field " + path + ": must be an integer, got " + string(se.JSONValue)
		case se.GoType != nil && se.JSONKind != 0:
			return "field " + path + ": must be " + goKind(se.GoType) + ", got " + jsonKind(se.JSONKind)
		case se.Err != nil:
			return "field " + path + ": " + se.Err.Error()
		}
		return "field " + path + ": invalid value"
	case errors.As(err, &ye):
		if errors.Is(ye.Err, jsontext.ErrDuplicateName) {
			return "duplicate field " + strconv.Quote(ye.JSONPointer.LastToken()) + within(ye.JSONPointer.Parent())
		}
		if errors.Is(ye.Err, io.ErrUnexpectedEOF) {
			return "malformed JSON: unexpected end of input"
		}
		return "malformed JSON: " + ye.Err.Error() + within(ye.JSONPointer)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "malformed JSON: unexpected end of input"
	}
	return err.Error()
}

// within is " in <path>" for a field below the top level, else "".
func within(p jsontext.Pointer) string {
	if path := fieldPath(p); path != "" {
		return " in " + path
	}
	return ""
}

// fieldPath writes a JSON pointer as the api names fields: /a/0/b is
// a[0].b.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// goKind names what a Go type accepts in JSON terms.
func goKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// isInteger reports whether t (or what it points to) is an integer type.
func isInteger(t reflect.Type) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// jsonKind names a JSON kind as the messages have always said it.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "bool"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return k.String()
}
