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
