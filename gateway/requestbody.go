package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/go-json-experiment/json/jsontext"
)

// A Messages call is admitted on what the gateway reads of its body (the
// model that picks the credential, the max_tokens its reservation is sized
// on, whether it streams) and the body then goes upstream as it came, so
// the gateway and the upstream must read the same bytes alike. JSON leaves
// room for two readings: a name twice in one object (encoding/json keeps
// the last, other parsers the first), a name in another case or spelling
// (encoding/json matches names case-insensitively, other decoders by
// alias), invalid UTF-8 (replaced by some, refused by others).
// readRequestHead reads the body strictly and refuses all of those, so
// that every conforming parser reads the bytes forwarded as the gateway
// did; the OpenAI translation decodes the same bytes as strictly and
// checks it reads the same head (openai.go).

// messageMembers are the top-level members of a Messages API request
// (count_tokens takes a subset of them). An unknown top-level member that
// is one of these in another case or spelling is refused; other unknown
// members go to the upstream, which refuses those it does not know either.
var messageMembers = []string{
	"model", "messages", "max_tokens", "stream", "system", "metadata", "stop_sequences",
	"temperature", "top_k", "top_p", "tools", "tool_choice", "thinking", "service_tier",
	"container", "mcp_servers", "context_management", "output_config", "output_format",
	"inference_geo", "cache_control", "speed",
}

// maxMaxTokens bounds max_tokens: far above any model's output, and low
// enough that a reservation never overflows.
const maxMaxTokens = math.MaxInt32

// requestHead is what the gateway reads of a Messages request body itself.
type requestHead struct {
	Model     string
	MaxTokens int64
	Stream    bool
	Messages  bool // messages is an array
}

// readRequestHead reads the model, max_tokens and stream of a Messages API
// body (count_tokens' too), checking the whole body as it goes: one JSON
// object in valid UTF-8, no name twice in any object, model a string,
// max_tokens an integer, stream a boolean (null reads as absent), and no
// top-level member that is a known one in another case or spelling. Its
// error names the offending member, for a 400.
func readRequestHead(raw []byte) (requestHead, error) {
	var head requestHead
	// jsontext's defaults: names are compared exactly, and a duplicate name
	// or invalid UTF-8 is an error.
	d := jsontext.NewDecoder(bytes.NewBuffer(raw))
	tok, err := d.ReadToken()
	if err != nil {
		return head, bodyError(err)
	}
	if tok.Kind() != '{' {
		return head, errors.New("body: must be a JSON object")
	}
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken() // a name, or the error PeekKind met
		if err != nil {
			return head, bodyError(err)
		}
		switch name := tok.String(); name {
		case "model":
			head.Model, err = readString(d, name)
		case "max_tokens":
			head.MaxTokens, err = readMaxTokens(d)
		case "stream":
			head.Stream, err = readBool(d, name)
		case "messages":
			head.Messages = d.PeekKind() == '['
			err = skipValue(d)
		default:
			if known, ok := lookalike(name); ok {
				return head, fmt.Errorf("body: unknown member %q: member names are exact and case-sensitive (did you mean %q?)", name, known)
			}
			err = skipValue(d)
		}
		if err != nil {
			return head, err
		}
	}
	if _, err := d.ReadToken(); err != nil { // the object's end
		return head, bodyError(err)
	}
	if _, err := d.ReadToken(); err != io.EOF {
		if err == nil {
			return head, errors.New("body: more JSON after the object")
		}
		return head, bodyError(err)
	}
	return head, nil
}

// skipValue steps over the next value, checking it.
func skipValue(d *jsontext.Decoder) error {
	if err := d.SkipValue(); err != nil {
		return bodyError(err)
	}
	return nil
}

// readString reads a string member's value; null reads as "".
func readString(d *jsontext.Decoder, name string) (string, error) {
	tok, err := d.ReadToken()
	switch {
	case err != nil:
		return "", bodyError(err)
	case tok.Kind() == '"':
		return tok.String(), nil
	case tok.Kind() == 'n':
		return "", nil
	}
	return "", fmt.Errorf("%s: must be a string", name)
}

// readBool reads a boolean member's value; null reads as false.
func readBool(d *jsontext.Decoder, name string) (bool, error) {
	tok, err := d.ReadToken()
	switch {
	case err != nil:
		return false, bodyError(err)
	case tok.Kind() == 't':
		return true, nil
	case tok.Kind() == 'f', tok.Kind() == 'n':
		return false, nil
	}
	return false, fmt.Errorf("%s: must be true or false", name)
}

// readMaxTokens reads max_tokens: an integer written as one (no fraction,
// no exponent), at most maxMaxTokens; null reads as 0.
func readMaxTokens(d *jsontext.Decoder) (int64, error) {
	tok, err := d.ReadToken()
	switch {
	case err != nil:
		return 0, bodyError(err)
	case tok.Kind() == 'n':
		return 0, nil
	case tok.Kind() == '0':
		if n, err := strconv.ParseInt(tok.String(), 10, 64); err == nil && n <= maxMaxTokens {
			return n, nil
		}
	}
	return 0, fmt.Errorf("max_tokens: must be an integer of at most %d", maxMaxTokens)
}

// bodyError is the 400 message of a body jsontext refused, naming a
// member named twice.
func bodyError(err error) error {
	var se *jsontext.SyntacticError
	switch {
	case errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName):
		where := ""
		if p := se.JSONPointer.Parent(); p != "" {
			where = " in " + string(p)
		}
		return fmt.Errorf("body: member %q appears twice%s: %w", se.JSONPointer.LastToken(), where, jsontext.ErrDuplicateName)
	case err == io.EOF:
		return fmt.Errorf("body: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("body: %w", err)
}

// foldedMembers are messageMembers as foldName has them.
var foldedMembers = func() []string {
	out := make([]string, len(messageMembers))
	for i, m := range messageMembers {
		out[i] = foldName(m)
	}
	return out
}()

// lookalike reports whether name, not itself a known member, is one once
// case (Unicode's simple folding, as encoding/json matches names) and
// everything but letters and digits are set aside, and which.
func lookalike(name string) (string, bool) {
	for _, m := range messageMembers {
		if name == m {
			return "", false
		}
	}
	folded := foldName(name)
	for i, m := range foldedMembers {
		if strings.EqualFold(folded, m) {
			return messageMembers[i], true
		}
	}
	return "", false
}

// foldName is name without the runes that are not letters or digits.
func foldName(name string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return -1
	}, name)
}
