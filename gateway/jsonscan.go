package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// scanner is a cursor over JSON text that reads the everyday shapes and
// validates what it skips; each method returns false where the text is
// invalid or of a shape it leaves to a decoder.
type scanner struct {
	data  []byte
	i     int
	depth int
}

// maxScanDepth bounds the nesting scanner skips; deeper text is decoded.
const maxScanDepth = 64

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume steps over c, after any space.
func (s *scanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// document reads data whole as one object (object's member and names),
// with nothing but space around it.
func (s *scanner) document(member func(name int) bool, names []string) bool {
	s.space()
	if !s.object(member, names) {
		return false
	}
	s.space()
	return s.i == len(s.data)
}

// object reads an object, calling member for each member whose name is
// one of names (by its index, the value not yet read) and skipping the
// others. A name that json.Unmarshal would match to one of names without
// being it (in another case, escaped, not ASCII) ends the scan.
func (s *scanner) object(member func(name int) bool, names []string) bool {
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	for {
		s.space()
		start := s.i
		if !s.skipString() {
			return false
		}
		name := s.data[start+1 : s.i-1]
		if !s.consume(':') {
			return false
		}
		s.space()
		k := -1
		if len(names) > 0 {
			k = matchName(name, names)
		}
		switch {
		case k == nameUnsure:
			return false
		case k >= 0:
			if !member(k) {
				return false
			}
		default:
			if !s.skipValue() {
				return false
			}
		}
		if s.consume(',') {
			continue
		}
		return s.consume('}')
	}
}

// nameUnsure is matchName's answer for a name it cannot match bytewise.
const nameUnsure = -2

// matchName is the index of name in names, -1 for a name json.Unmarshal
// would match to none of them, or nameUnsure. Names with escapes or bytes
// beyond ASCII are unsure; so are those equal to one of names once case,
// dashes and underscores are set aside.
func matchName(name []byte, names []string) int {
	for _, c := range name {
		if c == '\\' || c >= 0x80 {
			return nameUnsure
		}
	}
	for k, n := range names {
		if string(name) == n {
			return k
		}
	}
	for _, n := range names {
		if looseEqual(name, n) {
			return nameUnsure
		}
	}
	return -1
}

// looseEqual compares ASCII a and b ignoring case, dashes and underscores.
func looseEqual(a []byte, b string) bool {
	i, j := 0, 0
	for {
		for i < len(a) && (a[i] == '_' || a[i] == '-') {
			i++
		}
		for j < len(b) && (b[j] == '_' || b[j] == '-') {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if lower(a[i]) != lower(b[j]) {
			return false
		}
		i, j = i+1, j+1
	}
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// integer reads an integer within int64, as json.Unmarshal reads one into
// an int64: a fraction, an exponent or an overflow is left to it.
func (s *scanner) integer() (int64, bool) {
	start := s.i
	if !s.skipNumber() {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.data[start:s.i]), 10, 64)
	return n, err == nil
}

// plainString reads a string of printable ASCII without escapes into v.
func (s *scanner) plainString(v *string) bool {
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return false
	}
	for j := s.i + 1; j < len(s.data); j++ {
		switch c := s.data[j]; {
		case c == '"':
			*v = intern(s.data[s.i+1 : j])
			s.i = j + 1
			return true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return false
		}
	}
	return false
}

// knownStrings are the event types and stop reasons an everyday stream
// carries: reading one allocates nothing.
var knownStrings = []string{"message_start", "message_delta", "end_turn", "tool_use", "max_tokens",
	"stop_sequence", "pause_turn", "refusal"}

// intern is b as a string, one of knownStrings where it is one.
func intern(b []byte) string {
	for _, k := range knownStrings {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

// validJSON is json.Valid(data): the scanner reads the everyday shapes
// and json.Valid what it leaves.
func validJSON(data []byte) bool {
	s := scanner{data: data}
	s.space()
	if s.skipValue() {
		s.space()
		if s.i == len(s.data) {
			return true
		}
	}
	return json.Valid(data)
}

// skipValue steps over one valid JSON value.
func (s *scanner) skipValue() bool {
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '"':
		return s.skipString()
	case c == '{':
		return s.nested(s.skipObject)
	case c == '[':
		return s.nested(s.array)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.skipNumber()
	}
}

func (s *scanner) nested(skip func() bool) bool {
	if s.depth == maxScanDepth {
		return false
	}
	s.depth++
	ok := skip()
	s.depth--
	return ok
}

// skipObject steps over an object: with no names, object calls no member.
func (s *scanner) skipObject() bool { return s.object(nil, nil) }

func (s *scanner) array() bool {
	if !s.consume('[') {
		return false
	}
	if s.consume(']') {
		return true
	}
	for {
		s.space()
		if !s.skipValue() {
			return false
		}
		if s.consume(',') {
			continue
		}
		return s.consume(']')
	}
}

func (s *scanner) literal(lit string) bool {
	if len(s.data)-s.i >= len(lit) && string(s.data[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// skipString steps over a string: no control characters, only JSON's
// escapes. Bytes beyond ASCII pass as they are (json.Unmarshal replaces
// invalid UTF-8 rather than refusing it).
func (s *scanner) skipString() bool {
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return false
	}
	// Most strings have no escape: find the quote that ends them at once.
	if q := bytes.IndexByte(s.data[s.i+1:], '"'); q >= 0 {
		body := s.data[s.i+1 : s.i+1+q]
		if bytes.IndexByte(body, '\\') < 0 {
			for _, c := range body {
				if c < 0x20 {
					return false
				}
			}
			s.i += q + 2
			return true
		}
	}
	for j := s.i + 1; j < len(s.data); j++ {
		switch c := s.data[j]; {
		case c == '"':
			s.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			j++
			if j >= len(s.data) {
				return false
			}
			switch s.data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(s.data) {
					return false
				}
				for _, h := range s.data[j+1 : j+5] {
					if !isHex(h) {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// skipNumber steps over a number as JSON's grammar has it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) skipNumber() bool {
	d, i := s.data, s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i)
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return false
		}
		i = j
	}
	s.i = i
	return true
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}
