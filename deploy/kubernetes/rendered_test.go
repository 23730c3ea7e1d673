package kubernetes

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/rendered from the kustomizations")

// rendered are the kustomizations whose output testdata/rendered holds, by
// file name. compat/ renders them with the kustomize of older kubectl
// versions and wants the same bytes.
var rendered = map[string]string{
	"base":       "base",
	"production": filepath.Join("overlays", "production"),
}

// TestRenderedOutput: testdata/rendered holds exactly what this kustomize
// renders (`go test -run TestRenderedOutput -update` rewrites it), so that
// compat/ can compare older versions' output with it.
func TestRenderedOutput(t *testing.T) {
	t.Parallel()
	for name, dir := range rendered {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rm, err := kustomize(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rm.AsYaml()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "rendered", name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is not what kustomize renders from %s (%s); run `go test -run TestRenderedOutput -update` here",
					path, dir, firstDifference(string(want), string(got)))
			}
		})
	}
}

// firstDifference names the first line where two renders differ.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d: the file has %q, kustomize renders %q", i+1, wl, gl)
		}
	}
	return "no line differs"
}
