package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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
	url, roots, err := readListening(context.Background(), stdout, storetest.WaitTimeout)
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") || strings.HasSuffix(url, ":0") || roots != nil {
		t.Fatalf("listening line: %q, roots %v, %v", url, roots, err)
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

// With --tls, `ballet fake-llm` serves HTTPS, HTTP/2 offered, with a
// certificate it made at start and printed before its URL: a client that
// trusts that certificate alone is answered over HTTP/2, one that trusts
// the system's authorities is refused.
func TestFakeLLMServesTLSWithTheCertificateItPrints(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "fake-llm", "--addr", "127.0.0.1:0", "--tls")
	cmd.Env = append(cleanEnv(), "BALLET_TEST_AS_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url, roots, err := readListening(context.Background(), stdout, storetest.WaitTimeout)
	if err != nil || !strings.HasPrefix(url, "https://127.0.0.1:") || roots == nil {
		t.Fatalf("listening line: %q, roots %v, %v", url, roots, err)
	}
	body := `{"model":"claude-demo","max_tokens":500,"messages":[{"role":"user","content":"We need password reset"}]}`
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	t.Cleanup(tr.CloseIdleConnections)
	res, err := (&http.Client{Transport: tr}).Post(url+"/v1/messages", "application/json", strings.NewReader(body))
	must(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 || !strings.Contains(string(b), `"name":"list_runnable"`) {
		t.Fatalf("POST /v1/messages: %s %d %s", res.Proto, res.StatusCode, b)
	}
	system := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(system.CloseIdleConnections)
	var unknown x509.UnknownAuthorityError
	if _, err := (&http.Client{Transport: system}).Post(url+"/v1/messages", "application/json", strings.NewReader(body)); !errors.As(err, &unknown) {
		t.Fatalf("a client without the certificate: %v, want an unknown authority", err)
	}
}

// A certificate line that is not base64 DER is refused with its reason.
func TestReadListeningRefusesABadCertificateLine(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, out, want string }{
		{"not base64", fakeLLMCertificate + "%%%\n" + fakeLLMListening + "https://127.0.0.1:1\n", "certificate line: illegal base64"},
		{"not DER", fakeLLMCertificate + "AAAA\n" + fakeLLMListening + "https://127.0.0.1:1\n", "certificate line: x509"},
		{"https without one", fakeLLMListening + "https://127.0.0.1:1\n", "without printing its certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, roots, err := readListening(context.Background(), strings.NewReader(tt.out), storetest.WaitTimeout)
			if err == nil || !strings.Contains(err.Error(), tt.want) || url != "" || roots != nil {
				t.Fatalf("got %q, %v, %v; want an error with %q", url, roots, err, tt.want)
			}
		})
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
