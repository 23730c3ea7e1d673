package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
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
	var exited error
	gone := false
	storetest.Poll(storetest.WaitTimeout, func() bool {
		select {
		case exited = <-p.done:
			p.done <- exited // for the cleanup
			gone = true
			return true
		default:
		}
		res, err = http.Post("http://"+addr+"/v1/messages", "application/json", strings.NewReader(body))
		return err == nil
	})
	if gone {
		t.Fatalf("fake-llm exited (%v):\n%s", exited, p.log())
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
