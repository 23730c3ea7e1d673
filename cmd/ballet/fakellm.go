package main

import (
	"context"
	"fmt"
	"io"

	"github.com/balletplanner/ballet/gateway/fakellm"
)

// runFakeLLM serves a scripted fake model upstream (the Anthropic Messages
// API and OpenAI Chat Completions) until SIGTERM or SIGINT.
func runFakeLLM(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlags("fake-llm", "fake-llm [--addr 127.0.0.1:8090] [--script demo|PATH]\n\n"+
		"Serves POST /v1/messages (Anthropic) and POST /v1/chat/completions (OpenAI)\n"+
		"from a script (JSON or YAML) until SIGTERM. The built-in demo script plays a\n"+
		"planner on the demo project (see `ballet demo`).")
	addr := fs.String("addr", "127.0.0.1:8090", "address to listen on")
	script := fs.String("script", "demo", `"demo" or the path of a JSON or YAML script`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("fake-llm: unexpected argument %q", fs.Arg(0))}
	}
	if *addr == "" {
		return usageError{"fake-llm: --addr must not be empty"}
	}
	s, err := fakellm.Resolve(*script)
	if err != nil {
		return fmt.Errorf("fake-llm: --script %s: %w", *script, err)
	}
	return fakellm.ListenAndServe(ctx, *addr, s)
}
