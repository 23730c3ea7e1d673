package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/store/storetest"
)

// The memory phase runs the fake model in a process of its own, prints RSS
// and goroutine stacks per running turn beside the heap, and writes a heap
// profile and a goroutine profile at its peak.
func TestBenchTurnsMemoryProfile(t *testing.T) {
	t.Parallel()
	prof := filepath.Join(t.TempDir(), "mem.pprof")
	out, stderr, code := ballet(t, []string{"BALLET_DATABASE_URL=" + storetest.URL(t)}, "bench", "turns",
		"--mode", "queue", "--sessions", "1", "--messages", "1",
		"--memory-turns", "3", "--memory-latency", "1s", "--mem-profile", prof)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{
		"| running turns (peak) | HeapInuse at 0 | at peak | per running turn | Sys at 0 | at peak | per running turn | RSS at 0 | at peak | per running turn | goroutines per running turn |",
		"Goroutine stacks (StackInuse): ",
		"The fake model ran in a process of its own (ballet fake-llm): peak RSS ",
		"Heap profile at the peak: " + prof,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if m := regexp.MustCompile(`fake-llm\): peak RSS ([0-9]+) kB`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("the fake model's peak RSS is not a size:\n%s", out)
	}
	heap, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(heap, []byte{0x1f, 0x8b}) { // a pprof profile is gzipped
		t.Errorf("heap profile is not a pprof profile: %d bytes starting %q", len(heap), heap[:min(len(heap), 8)])
	}
	g, err := os.ReadFile(prof + ".goroutines")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(g), "goroutine profile: total ") {
		t.Errorf("goroutine profile starts %q", string(g[:min(len(g), 40)]))
	}
}
