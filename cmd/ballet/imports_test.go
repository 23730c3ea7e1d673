package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsGoOneWay checks the import graph with `go list`: the worker
// links only the gateway's client package, never the gateway server or the
// fake model, no production package links the fake model but cmd, the
// api and the task contract take request ids from their own package, not
// the gateway's client, and the terminal chat is a client of the api only.
func TestImportsGoOneWay(t *testing.T) {
	t.Parallel()
	const mod = "github.com/balletplanner/ballet"
	tests := []struct {
		pkg    string
		banned []string
		needed []string
	}{
		{"worker", []string{mod + "/gateway", mod + "/gateway/fakellm"}, []string{mod + "/gateway/llm"}},
		{"gateway", []string{mod + "/gateway/fakellm"}, []string{mod + "/gateway/llm"}},
		{"api", []string{mod + "/gateway/fakellm", mod + "/gateway/llm"}, []string{mod + "/internal/requestid"}},
		{"tasks", []string{mod + "/gateway/llm"}, []string{mod + "/internal/requestid"}},
		{"gateway/llm", []string{mod + "/gateway", mod + "/store"}, nil},
		{"chat", []string{mod + "/api", mod + "/tasks", mod + "/worker", mod + "/gateway", mod + "/gateway/llm"},
			[]string{mod + "/api/rpcclient"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("go", "list", "-deps", mod+"/"+tt.pkg).Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("go list -deps %s: %v\n%s", tt.pkg, err, stderr)
			}
			deps := strings.Fields(string(out))
			for _, b := range tt.banned {
				if slices.Contains(deps, b) {
					t.Errorf("%s links %s", tt.pkg, b)
				}
			}
			for _, n := range tt.needed {
				if !slices.Contains(deps, n) {
					t.Errorf("%s does not link %s (go list gave %d packages)", tt.pkg, n, len(deps))
				}
			}
		})
	}
}

// TestReadmeImportGraph checks that the import graph the README shows is
// the one `go list` gives, for every package it names.
func TestReadmeImportGraph(t *testing.T) {
	t.Parallel()
	const mod = "github.com/balletplanner/ballet/"
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- import graph -->\n```\n")
	if !ok {
		t.Fatal("README has no import graph block")
	}
	block, _, _ = strings.Cut(block, "```")
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		pkg, imports, ok := strings.Cut(line, " →")
		if !ok {
			t.Fatalf("README import graph line %q", line)
		}
		var want []string
		for _, imp := range strings.Split(imports, ",") {
			if imp = strings.TrimSpace(imp); imp != "" {
				want = append(want, imp)
			}
		}
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		var got []string
		for _, imp := range strings.Fields(string(out)) {
			if rest, ok := strings.CutPrefix(imp, mod); ok {
				got = append(got, rest)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("README says %s imports %v; go list says %v", pkg, want, got)
		}
	}
}
