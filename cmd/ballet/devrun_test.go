package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// `make run` (deploy/dev/run.sh) serves on this machine only unless told
// otherwise, and says where it listens. The script runs against a stand-in
// for the binary that prints the addresses `serve` gets.
func TestMakeRunListensOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ballet")
	must(t, os.WriteFile(bin, []byte(`#!/bin/sh
case "$1" in
demo) echo '{"token": "blt_test"}' ;;
serve) echo "serve: server=$BALLET_SERVER_ADDR gateway=$BALLET_GATEWAY_ADDR" ;;
esac
`), 0o755))
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"default", nil, []string{"serve: server=127.0.0.1:8080 gateway=127.0.0.1:8082", "listening on 127.0.0.1:8080"}},
		{"every interface when asked", []string{"BALLET_SERVER_ADDR=:9191", "BALLET_GATEWAY_ADDR=:9192"},
			[]string{"serve: server=:9191 gateway=:9192", "http://127.0.0.1:9191"}},
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "dev", "run.sh"))
	must(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Run from a directory of its own: the script writes .dev/demo-token there.
			cmd := exec.Command("bash", script, bin)
			cmd.Dir = t.TempDir()
			cmd.Env = append(os.Environ(), "BALLET_DATABASE_URL="+storetest.URL(t), "BALLET_GATEWAY_FAKE=demo",
				"BALLET_SERVER_ADDR=", "BALLET_GATEWAY_ADDR=")
			cmd.Env = append(cmd.Env, tt.env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("run.sh: %v\n%s", err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("run.sh output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// `make build` (deploy/dev/build.sh) names each module it fetches and
// counts the packages it compiles, so a first build that takes minutes is
// never silent; a failed build shows the compiler's error and fails. The
// script runs against a stand-in for the go command.
func TestMakeBuildShowsProgress(t *testing.T) {
	t.Parallel()
	fake := filepath.Join(t.TempDir(), "go")
	must(t, os.WriteFile(fake, []byte(`#!/bin/sh
case "$1" in
mod)
	echo "# get https://modules.invalid/github.com/acme/left/@v/v1.2.3.info"
	echo "# get https://modules.invalid/github.com/acme/left/@v/v1.2.3.zip"
	echo "# get https://modules.invalid/github.com/acme/left/@v/v1.2.3.zip: 200 OK (0.1s)"
	echo "# get https://modules.invalid/golang.org/x/right/@v/v0.4.0.zip" ;;
build)
	i=1
	while [ $i -le 250 ]; do echo "example.com/pkg$i"; i=$((i+1)); done
	if [ -n "$FAIL_BUILD" ]; then echo "cmd/ballet/main.go:3:1: syntax error" >&2; exit 2; fi ;;
esac
`), 0o755))
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "dev", "build.sh"))
	must(t, err)
	tests := []struct {
		name   string
		fail   bool
		want   []string
		refuse []string
	}{
		{"a build", false, []string{"build: fetched github.com/acme/left@v1.2.3", "build: fetched golang.org/x/right@v0.4.0",
			"build: 2 modules fetched", "build: 100 packages compiled (example.com/pkg100)", "build: 200 packages compiled (example.com/pkg200)",
			"build: 250 packages compiled", "build: out/ballet is ready"}, []string{"modules.invalid", "example.com/pkg7\n"}},
		{"a failed build", true, []string{"cmd/ballet/main.go:3:1: syntax error"}, []string{"is ready"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("bash", script, "out/ballet", "-s -w")
			cmd.Env = append(os.Environ(), "GO="+fake)
			if tt.fail {
				cmd.Env = append(cmd.Env, "FAIL_BUILD=1")
			}
			out, err := cmd.CombinedOutput()
			if (err != nil) != tt.fail {
				t.Fatalf("build.sh: error %v, want failure %v\n%s", err, tt.fail, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("build.sh output lacks %q:\n%s", w, out)
				}
			}
			for _, r := range tt.refuse {
				if strings.Contains(string(out), r) {
					t.Errorf("build.sh output holds %q:\n%s", r, out)
				}
			}
		})
	}
}
