package fakellm

import (
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Dimensions is the length of the fake's embedding vectors.
const Dimensions = 256

// Concepts is the fake's thesaurus: the words of one group share a
// dimension of the embedding, so that a text is near another that uses a
// word of the same group ("outage" and "downtime") as well as one that uses
// the same word. Words are compared lowercased, with a plural s dropped.
var Concepts = [][]string{
	{"outage", "downtime", "incident", "disruption", "unavailable"},
	{"login", "signin", "authentication", "sso", "password"},
	{"invoice", "billing", "payment", "charge", "refund"},
	{"slow", "latency", "sluggish", "lag", "performance"},
	{"deploy", "release", "rollout", "launch", "ship"},
	{"bug", "error", "crash", "failure", "exception"},
	{"search", "find", "query", "lookup", "index"},
	{"database", "postgres", "sql", "storage", "table"},
	{"customer", "client", "user", "account", "tenant"},
	{"test", "testing", "qa", "verify", "check"},
	{"document", "docs", "documentation", "guide", "manual"},
	{"security", "vulnerability", "exploit", "breach", "cve"},
}

// stopWords carry no meaning of their own; texts sharing only these are not
// made near.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true, "for": true,
	"from": true, "in": true, "is": true, "it": true, "of": true, "on": true, "or": true, "that": true, "the": true,
	"this": true, "to": true, "was": true, "we": true, "with": true,
}

// conceptOf maps a normalised concept word to its group's dimension; the
// first len(Concepts) dimensions belong to the groups, the others to words.
var conceptOf = func() map[string]int {
	m := map[string]int{}
	for i, group := range Concepts {
		for _, w := range group {
			m[normalise(w)] = i
		}
	}
	return m
}()

// normalise lowercases a word and drops a plural s ("outages" → "outage").
func normalise(w string) string {
	w = strings.ToLower(w)
	if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
		w = w[:len(w)-1]
	}
	return w
}

// words splits text into its normalised words (runs of letters and digits),
// stop words left out.
func words(text string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if w := normalise(f); !stopWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// Embed is the fake's embedding of text: Dimensions floats, L2-normalised
// and the same for the same text every time. Each word adds ±1 to a
// dimension chosen by its hash (the sign hashed too, so unrelated words
// cancel out on average); a word of a Concepts group also adds 1 to its
// group's dimension. A text without words gets a fixed vector of its own
// hash.
func Embed(text string) []float32 {
	v := make([]float64, Dimensions)
	ws := words(text)
	if len(ws) == 0 {
		ws = []string{"\x00" + text}
	}
	span := uint32(Dimensions - len(Concepts))
	for _, w := range ws {
		h := fnv.New32a()
		h.Write([]byte(w))
		sum := h.Sum32()
		sign := 1.0
		if sum&1 == 1 {
			sign = -1
		}
		v[len(Concepts)+int((sum>>1)%span)] += sign
		if g, ok := conceptOf[w]; ok {
			v[g]++
		}
	}
	norm := 0.0
	for _, x := range v {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	out := make([]float32, Dimensions)
	for i, x := range v {
		if norm > 0 {
			out[i] = float32(x / norm)
		}
	}
	if norm == 0 {
		// The words cancelled out exactly: fall back to the first word's dimension.
		out[len(Concepts)] = 1
	}
	return out
}

// embedTokens is the prompt tokens the fake reports for texts: four
// characters a token, as its other usage figures.
func embedTokens(texts []string) int64 {
	var n int64
	for _, t := range texts {
		n += int64(len(t)+3) / 4
	}
	return n
}
