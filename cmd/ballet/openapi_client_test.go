package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// openapiTools is the npm project that lints api/openapi.json and builds a
// TypeScript client from it.
var openapiTools = filepath.Join("..", "..", "tools", "openapi")

// openapiToolsOnce installs the tools' npm dependencies once per process.
var openapiToolsOnce struct {
	sync.Once
	out []byte
	err error
}

// needOpenAPITools returns the tools' directory, its dependencies installed
// by `npm ci` from the committed lockfile when node_modules is missing.
func needOpenAPITools(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: `make test` installs it (deploy/dev/services.sh node)", bin)
		}
	}
	openapiToolsOnce.Do(func() {
		if _, err := os.Stat(filepath.Join(openapiTools, "node_modules", ".package-lock.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = openapiTools
		openapiToolsOnce.out, openapiToolsOnce.err = cmd.CombinedOutput()
	})
	if openapiToolsOnce.err != nil {
		t.Fatalf("npm ci in tools/openapi: %v\n%s", openapiToolsOnce.err, openapiToolsOnce.out)
	}
	return openapiTools
}

// toolScript is the absolute path of a script of the tools' node_modules.
func toolScript(t *testing.T, elem ...string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(append([]string{openapiTools, "node_modules"}, elem...)...))
	must(t, err)
	return abs
}

// runNode runs a node script in dir.
func runNode(t *testing.T, dir string, env []string, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("node", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestOpenAPIDocumentLints runs Redocly's linter on api/openapi.json with
// tools/openapi/redocly.yaml: its recommended rules, every warning an error.
func TestOpenAPIDocumentLints(t *testing.T) {
	t.Parallel()
	dir := needOpenAPITools(t)
	out := runNode(t, dir, []string{"NO_COLOR=1", "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true"},
		toolScript(t, "@redocly", "cli", "bin", "cli.js"), "lint", filepath.Join("..", "..", "api", "openapi.json"), "--config", "redocly.yaml")
	// With every rule an error, a problem fails the run; none is ignored.
	if !strings.Contains(out, "Your API description is valid") || strings.Contains(out, "You have") || strings.Contains(out, "ignored") {
		t.Fatalf("lint:\n%s", out)
	}
}

// TestGeneratedTypeScriptClient generates TypeScript types from
// api/openapi.json with openapi-typescript, type-checks tools/openapi's
// client against them (tsc, strict: a free-form object that became
// Record<string, never> fails here), and runs it with openapi-fetch against
// a live `ballet serve`: it lists organizations and projects, creates an
// item, reads the item's events with their free-form payloads and gets a
// typed 404.
func TestGeneratedTypeScriptClient(t *testing.T) {
	t.Parallel()
	tools := needOpenAPITools(t)
	work := t.TempDir()
	for _, f := range []string{"client.ts", "tsconfig.json", "package.json"} {
		b, err := os.ReadFile(filepath.Join(tools, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(work, f), b, 0o644))
	}
	modules, err := filepath.Abs(filepath.Join(tools, "node_modules"))
	must(t, err)
	must(t, os.Symlink(modules, filepath.Join(work, "node_modules")))
	doc, err := filepath.Abs(filepath.Join("..", "..", "api", "openapi.json"))
	must(t, err)
	// openapi-typescript validates the document with the redocly.yaml of its
	// working directory: the tools'.
	runNode(t, tools, nil, toolScript(t, "openapi-typescript", "bin", "cli.js"), doc, "-o", filepath.Join(work, "ballet.d.ts"))
	runNode(t, work, nil, toolScript(t, "typescript", "bin", "tsc"), "-p", ".")

	p, token, _ := startDemoServe(t, "demo")
	out := runNode(t, work, []string{"BALLET_URL=http://" + p.addr, "BALLET_TOKEN=" + token}, filepath.Join(work, "dist", "client.js"))
	var got struct {
		Organization string `json:"organization"`
		Project      string `json:"project"`
		Item         string `json:"item"`
		Event        string `json:"event"`
		PayloadTitle string `json:"payload_title"`
		Missing      string `json:"missing"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if got.Project != "DEMO" || !strings.HasPrefix(got.Item, "DEMO-") || got.Event == "" ||
		got.PayloadTitle != "Typed client ticket" || got.Missing != "not_found" {
		t.Fatalf("client saw %+v", got)
	}
}
