package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	res := postUntilAnswered(t, p, addr, body)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"list_runnable"`) ||
		!strings.Contains(string(b), `"type":"message"`) {
		t.Fatalf("POST /v1/messages: %d %s", res.StatusCode, b)
	}
	p.stop(t)
}

// With port 0, `ballet fake-llm` picks a free port and prints the URL it
// serves on once it listens: how `ballet bench turns` starts its model.
func TestFakeLLMPrintsTheURLOfAPickedPort(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "fake-llm", "--addr", "127.0.0.1:0")
	cmd.Env = append(cleanEnv(), "BALLET_TEST_AS_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url, err := readListening(context.Background(), stdout, storetest.WaitTimeout)
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") || strings.HasSuffix(url, ":0") {
		t.Fatalf("listening line: %q, %v", url, err)
	}
	body := `{"model":"claude-demo","max_tokens":500,"messages":[{"role":"user","content":"We need password reset"}]}`
	res, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(body))
	must(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"list_runnable"`) {
		t.Fatalf("POST /v1/messages: %d %s", res.StatusCode, b)
	}
}

func TestFakeLLMRefusesAMissingScript(t *testing.T) {
	t.Parallel()
	_, stderr, code := ballet(t, nil, "fake-llm", "--addr", freeAddr(t), "--script", t.TempDir()+"/nope.yaml")
	if code != 1 || !strings.Contains(stderr, "--script") || !strings.Contains(stderr, "nope.yaml") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestGatewayServesTheFakeOnFakeAddr: with gateway.fake = demo, `ballet
// gateway` serves the scripted fake model on gateway.fake_addr as its
// fallback upstream, and stops it with the process.
func TestGatewayServesTheFakeOnFakeAddr(t *testing.T) {
	t.Parallel()
	fakeAddr := freeAddr(t)
	p := startProcess(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_GATEWAY_SIGNING_KEY=" + "fakellm-test-signing-key-0123456789",
		"BALLET_GATEWAY_FAKE=demo", "BALLET_GATEWAY_FAKE_ADDR=" + fakeAddr}, "gateway")
	body := `{"model":"claude-demo","max_tokens":500,"messages":[{"role":"user","content":"We need password reset"}]}`
	res := postUntilAnswered(t, p, fakeAddr, body)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"list_runnable"`) {
		t.Fatalf("POST /v1/messages: %d %s", res.StatusCode, b)
	}
	storetest.WaitFor(t, "the log to name the fake model and its URL", func() bool {
		return strings.Contains(p.log(), "from the scripted fake model") && strings.Contains(p.log(), "http://"+fakeAddr)
	})
	p.stop(t)
	if res, err := http.Post("http://"+fakeAddr+"/v1/messages", "application/json", strings.NewReader(body)); err == nil {
		res.Body.Close()
		t.Fatalf("the fake still answers on %s after the gateway stopped", fakeAddr)
	}
}

func TestGatewayRefusesABadFakeAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, addr, want string
	}{
		{"no port", "localhost", "gateway.fake_addr: must be host:port"},
		{"taken", "", "gateway.fake_addr: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := tt.addr
			if addr == "" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				addr = ln.Addr().String()
			}
			_, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t), "BALLET_GATEWAY_SIGNING_KEY=" + "fakellm-test-signing-key-0123456789",
				"BALLET_GATEWAY_ADDR=" + freeAddr(t), "BALLET_METRICS_ADDR=" + freeAddr(t),
				"BALLET_GATEWAY_FAKE=demo", "BALLET_GATEWAY_FAKE_ADDR=" + addr}, "gateway")
			if code == 0 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "goroutine") {
				t.Fatalf("exit %d, stderr %q; want a failure naming %q", code, stderr, tt.want)
			}
		})
	}
}

// postUntilAnswered posts body to the fake model on addr, served by p,
// until it answers; it fails the test when p exits first or never answers.
func postUntilAnswered(t *testing.T, p *process, addr, body string) *http.Response {
	t.Helper()
	var (
		res    *http.Response
		err    error
		exited error
		gone   bool
	)
	answers := storetest.Poll(storetest.WaitTimeout, func() bool {
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
	if gone || !answers {
		t.Fatalf("the fake never answered on %s (exited %v, %v):\n%s", addr, exited, err, p.log())
	}
	return res
}
