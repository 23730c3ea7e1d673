package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/gateway"
	"github.com/balletplanner/ballet/gateway/fakellm"
)

func newFakeLLMCmd() *cobra.Command {
	var addr, script string
	var useTLS bool
	c := &cobra.Command{
		Use:   "fake-llm",
		Short: "serve the scripted fake model upstream (demo or a script file)",
		Long: "Serves POST /v1/messages (Anthropic), POST /v1/messages/count_tokens, POST /v1/chat/completions (OpenAI)\n" +
			"and POST /v1/embeddings (deterministic vectors: words hashed into 256 dimensions, concepts sharing one)\n" +
			"from a script (JSON or YAML) until SIGTERM. The built-in demo script plays a\n" +
			"planner on the demo project (see `ballet demo`).",
		Example: "  ballet fake-llm --addr 127.0.0.1:8090 --script demo",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFakeLLM(cmd.Context(), cmd.OutOrStdout(), addr, script, useTLS)
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:8090", "`host:port` to listen on (port 0 picks a free one; the URL is printed once listening)")
	c.Flags().StringVar(&script, "script", "demo", `"demo" or the `+"`PATH`"+` of a JSON or YAML script`)
	c.Flags().BoolVar(&useTLS, "tls", false, "serve HTTPS (HTTP/2 offered) with a self-signed certificate made at start, printed on stdout (base64 DER) before the URL")
	_ = c.MarkFlagFilename("script", "json", "yaml", "yml")
	return c
}

// fakeLLMListening starts the line `ballet fake-llm` prints on stdout
// once it listens, followed by its base URL.
const fakeLLMListening = "fake-llm: listening on "

// fakeLLMCertificate starts the line `ballet fake-llm --tls` prints on
// stdout before the listening line, followed by its self-signed
// certificate, DER in standard base64.
const fakeLLMCertificate = "fake-llm: certificate "

// runFakeLLM serves a scripted fake model upstream (the Anthropic Messages
// API and OpenAI Chat Completions) until SIGTERM or SIGINT, and prints its
// URL on out once it listens; with useTLS it serves HTTPS with a
// self-signed certificate made here, printed on out before the URL.
func runFakeLLM(ctx context.Context, out io.Writer, addr, script string, useTLS bool) error {
	if addr == "" {
		return usageError{"fake-llm: --addr must not be empty"}
	}
	s, err := fakellm.Resolve(script)
	if err != nil {
		return fmt.Errorf("fake-llm: --script %s: %w", script, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fake-llm: --addr: %w", err)
	}
	scheme := "http"
	if useTLS {
		cert, err := fakellm.SelfSigned()
		if err != nil {
			ln.Close()
			return fmt.Errorf("fake-llm: --tls: %w", err)
		}
		ln, scheme = fakellm.TLSListener(ln, cert), "https"
		fmt.Fprintf(out, "%s%s\n", fakeLLMCertificate, base64.StdEncoding.EncodeToString(cert.Leaf.Raw))
	}
	fmt.Fprintf(out, "%s%s://%s\n", fakeLLMListening, scheme, ln.Addr())
	return fakellm.Serve(ctx, ln, s)
}

// fakeUpstream is the scripted fake model that gateway.fake names, served
// on gateway.fake_addr as the gateway's fallback upstream.
type fakeUpstream struct {
	srv    *fakellm.Server
	addr   string
	script string
	log    *slog.Logger
}

// newFakeUpstream loads the script; it starts nothing.
func newFakeUpstream(cfg gateway.Config, log *slog.Logger) (*fakeUpstream, error) {
	s, err := fakellm.Resolve(cfg.Fake)
	if err != nil {
		return nil, fmt.Errorf("gateway.fake: %w", err)
	}
	return &fakeUpstream{srv: fakellm.New(s), addr: cfg.FakeAddr, script: cfg.Fake, log: log}, nil
}

// Start listens on gateway.fake_addr.
func (f *fakeUpstream) Start(ctx context.Context) error {
	if err := f.srv.StartOn(f.addr); err != nil {
		return fmt.Errorf("gateway.fake_addr: %w", err)
	}
	f.log.InfoContext(ctx, "gateway answers calls without a provider credential from the scripted fake model",
		slog.String("script", f.script), slog.String("url", f.srv.URL()))
	return nil
}

// Stop closes the listener and its connections; safe before Start and
// twice.
func (f *fakeUpstream) Stop() { f.srv.Close() }
