package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain lets tests run the real binary: the test executable re-executes
// itself as `ballet` when BALLET_TEST_AS_MAIN is set.
func TestMain(m *testing.M) {
	if os.Getenv("BALLET_TEST_AS_MAIN") == "1" {
		os.Args = append([]string{"ballet"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ballet runs the binary with args and extra environment, and returns its
// stdout, stderr and exit code.
func ballet(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return balletIn(t, "", "", env, args...)
}

// balletIn is ballet in directory dir ("" the test's) with stdin.
func balletIn(t *testing.T, dir, stdin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), append([]string{"BALLET_TEST_AS_MAIN=1"}, env...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// cleanEnv is the environment without BALLET_ settings of the developer's.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BALLET_") || strings.HasPrefix(kv, "BALLET_TEST_") {
			env = append(env, kv)
		}
	}
	return env
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := t.TempDir() + "/ballet.toml"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := ballet(t, nil, c.name, "--help")
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			if !strings.Contains(stderr, "Usage: ballet "+c.name) {
				t.Fatalf("no usage in %q", stderr)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	_, stderr, code := ballet(t, nil, "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, code := ballet(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "ballet ") {
		t.Fatalf("exit %d, out %q", code, out)
	}
}
