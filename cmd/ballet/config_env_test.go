package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// documentedVariable is a BALLET_ variable as the docs write it.
var documentedVariable = regexp.MustCompile(`\bBALLET_[A-Z0-9_]*[A-Z0-9]\b`)

// documentedVariables are the BALLET_ variables that README.md, docs/,
// docker-compose.yml, the Makefile and deploy/ (its scripts, manifests and
// monitoring; not the Kubernetes test's deliberately broken fixtures nor
// Go sources) mention, with a file that mentions each.
func documentedVariables(t *testing.T) map[string]string {
	t.Helper()
	files := []string{"../../README.md", "../../docker-compose.yml", "../../Makefile"}
	docs, err := filepath.Glob("../../docs/*.md")
	must(t, err)
	files = append(files, docs...)
	must(t, filepath.WalkDir("../../deploy", func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case !d.IsDir() && !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".sum"):
			files = append(files, path)
		}
		return nil
	}))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		for _, name := range documentedVariable.FindAllString(string(b), -1) {
			out[name] = strings.TrimPrefix(f, "../../")
		}
	}
	for _, must := range []string{"BALLET_TOKEN", "BALLET_PUBLISH_ADDR", "BALLET_VERSION", "BALLET_DATABASE_URL", "BALLET_GATEWAY_SIGNING_KEY"} {
		if out[must] == "" {
			t.Fatalf("no file mentions %s: the search for documented variables is broken (found %d)", must, len(out))
		}
	}
	return out
}

// keyEnvValue is a key's default written as its variable takes it.
func keyEnvValue(v reflect.Value) string {
	if v.Type() == reflect.TypeOf(time.Duration(0)) {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		return strings.Join(v.Interface().([]string), ",")
	}
	return v.String()
}

// TestDocumentedVariablesLoad: no BALLET_ variable the docs, compose file,
// Makefile or deploy/ tell a user to set stops a command from loading its
// configuration: each is a key's (set here to its default) or one of
// otherEnv, which every command ignores; all of them at once load too.
func TestDocumentedVariablesLoad(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	values := map[string]string{}
	for _, f := range fields(&cfg) {
		values[f.env] = keyEnvValue(f.value)
	}
	var all []string
	for name, file := range documentedVariables(t) {
		v, key := values[name]
		if !key {
			v = "1"
		}
		kv := name + "=" + v
		all = append(all, kv)
		if _, err := LoadConfig("", []string{kv}); err != nil {
			t.Errorf("%s (in %s): %v", name, file, err)
		}
	}
	if _, err := LoadConfig("", all); err != nil {
		t.Errorf("every documented variable at once: %v", err)
	}
}

// TestOtherVariablesAreIgnored: the variables of `ballet chat`, compose
// and the dev scripts leave the configuration as it was, in every command
// that loads one (the binary, as a user runs it), while a near miss of one
// is still refused by name.
func TestOtherVariablesAreIgnored(t *testing.T) {
	t.Parallel()
	var env []string
	for name := range otherEnv {
		if name != "BALLET_CONFIG" {
			env = append(env, name+"=set-by-the-user")
		}
	}
	slices.Sort(env)
	want, err := DefaultConfig().Printable()
	must(t, err)
	out, stderr, code := ballet(t, env, "config", "print")
	if code != 0 || out != want {
		t.Errorf("config print with %v: exit %d, stderr %q; want the defaults", env, code, stderr)
	}
	for _, tt := range []struct{ name, want string }{
		{"BALLET_TOKENS", "unknown environment variable BALLET_TOKENS"},
		{"BALLET_PUBLISH_ADR", "unknown environment variable BALLET_PUBLISH_ADR"},
		{"BALLET_SERVER_ADR", "unknown environment variable BALLET_SERVER_ADR"},
	} {
		_, err := LoadConfig("", append(slices.Clone(env), tt.name+"=x"))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "BALLET_TOKEN") {
			t.Errorf("%s: %v; want %q, listing the variables that are not keys", tt.name, err, tt.want)
		}
	}
}

// TestOtherVariablesAreNoKeys: no name of otherEnv is a key's variable (it
// would be ignored), and each says what reads it, as docs/operations.md
// does.
func TestOtherVariablesAreNoKeys(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	for _, f := range fields(&cfg) {
		if otherEnv[f.env] != "" || strings.HasPrefix(f.env, testEnvPrefix) {
			t.Errorf("%s is the variable of %s, and would be ignored", f.env, f.key)
		}
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	must(t, err)
	for name, what := range otherEnv {
		if !documentedVariable.MatchString(name) || what == "" {
			t.Errorf("%s: %q", name, what)
		}
		if !strings.Contains(strings.ReplaceAll(string(ops), "`", ""), "| "+name+" | "+what) {
			t.Errorf("docs/operations.md does not list %s as read by %s", name, what)
		}
	}
}
