package gateway

import (
	"fmt"
	"strings"
	"sync"
)

// maxModelLen bounds a model name.
const maxModelLen = 128

// modelChars are the characters a model name may use: enough for
// claude-sonnet-4-5@20250929, llama3.1:8b and meta-llama/Llama-3.1-8B-Instruct.
const modelChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/@+"

// otherModelLabel is the metric label of the model names beyond the cap.
const otherModelLabel = "_other"

// validateModel refuses an empty, overlong or oddly spelled model name; a
// name becomes a metric label and a usage row.
func validateModel(m string) error {
	switch {
	case m == "":
		return fmt.Errorf("model: field required")
	case len(m) > maxModelLen:
		return fmt.Errorf("model: at most %d characters, got %d", maxModelLen, len(m))
	case strings.IndexFunc(m, func(r rune) bool { return !strings.ContainsRune(modelChars, r) }) >= 0:
		return fmt.Errorf("model: only letters, digits and . _ - : / @ + are allowed")
	}
	return nil
}

// modelLabels keeps the model label set of the metrics bounded: a model
// gets its own label once an upstream answered a call for it, as long as
// fewer than max have one; every other call counts under otherModelLabel.
// Names an upstream refuses therefore never become series.
type modelLabels struct {
	max int

	mu   sync.Mutex
	seen map[string]struct{}
}

func newModelLabels(max int) *modelLabels {
	return &modelLabels{max: max, seen: map[string]struct{}{}}
}

// label is the metric label of model; answered says an upstream answered
// the call with success.
func (l *modelLabels) label(model string, answered bool) string {
	if l == nil {
		return model
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[model]; ok {
		return model
	}
	if answered && len(l.seen) < l.max {
		l.seen[model] = struct{}{}
		return model
	}
	return otherModelLabel
}
