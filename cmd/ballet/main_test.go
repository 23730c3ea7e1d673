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

// TestBinaryConventions: the binary's streams and exit statuses for help,
// the version, usage mistakes and failures.
func TestBinaryConventions(t *testing.T) {
	t.Parallel()
	missing := t.TempDir() + "/missing.toml"
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, error string
	}{
		{"version", []string{"version"}, 0, "ballet dev\n", ""},
		{"--version", []string{"--version"}, 0, "ballet dev\n", ""},
		{"--help", []string{"--help"}, 0, "Usage:\n  ballet <command>", ""},
		{"help bench", []string{"help", "bench"}, 0, "turns ", ""},
		{"serve --help", []string{"serve", "--help"}, 0, "BALLET_DATABASE_URL", ""},
		{"no command", nil, 2, "", "ballet: a command is required"},
		{"unknown command", []string{"frobnicate"}, 2, "", "ballet: unknown command \"frobnicate\" for \"ballet\"\nRun 'ballet --help' for usage.\n"},
		{"unknown flag", []string{"migrate", "up", "--nope"}, 2, "", "ballet: unknown flag: --nope\nRun 'ballet migrate up --help' for usage.\n"},
		{"single-dash long flag", []string{"config", "print", "-config", missing}, 2, "", "unknown shorthand flag: 'c' in -config"},
		{"extra argument", []string{"migrate", "up", "now"}, 2, "", `unknown argument "now" for "ballet migrate up"`},
		{"failure", []string{"config", "print", "--config", missing}, 1, "", "ballet: config " + missing + ": open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, stderr, code := ballet(t, nil, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q, stderr %q", code, tc.code, out, stderr)
			}
			if tc.out == "" && out != "" || !strings.Contains(out, tc.out) {
				t.Errorf("stdout %q, want %q", out, tc.out)
			}
			if tc.error == "" && stderr != "" || !strings.Contains(stderr, tc.error) {
				t.Errorf("stderr %q, want %q", stderr, tc.error)
			}
		})
	}
}
