package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFakeLLMServesTheDemo starts `ballet fake-llm`, asks it the first
// question of the demo and stops it with SIGTERM.
func TestFakeLLMServesTheDemo(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	p := startProcess(t, nil, "fake-llm", "--addr", addr)
	body := `{"model":"claude-demo","max_tokens":500,"messages":[{"role":"user","content":"We need password reset"}]}`
	var (
		res *http.Response
		err error
	)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err = http.Post("http://"+addr+"/v1/messages", "application/json", strings.NewReader(body))
		if err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-p.done:
			t.Fatalf("fake-llm exited (%v):\n%s", err, p.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatalf("fake-llm never answered: %v\n%s", err, p.log())
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"list_runnable"`) ||
		!strings.Contains(string(b), `"type":"message"`) {
		t.Fatalf("POST /v1/messages: %d %s", res.StatusCode, b)
	}
	p.stop(t)
}

func TestFakeLLMRefusesAMissingScript(t *testing.T) {
	t.Parallel()
	_, stderr, code := ballet(t, nil, "fake-llm", "--addr", freeAddr(t), "--script", t.TempDir()+"/nope.yaml")
	if code != 1 || !strings.Contains(stderr, "--script") || !strings.Contains(stderr, "nope.yaml") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
