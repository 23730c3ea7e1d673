package porttest

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsLieBelowTheEphemeralRangeAndAreFree(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for range 200 {
		p := Port(t)
		if p < lowest || p >= ephemeralStart() {
			t.Fatalf("port %d outside %d-%d", p, lowest, ephemeralStart()-1)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	ln, err := net.Listen("tcp", Addr(t))
	if err != nil {
		t.Fatalf("listen on a handed-out address: %v", err)
	}
	_ = ln.Close()
}

func TestATakenPortIsNeverHandedOut(t *testing.T) {
	t.Parallel()
	// Hold many ports of the range; none of them may come back.
	held := map[int]net.Listener{}
	for range 50 {
		p := Port(t)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatal(err)
		}
		held[p] = ln
	}
	t.Cleanup(func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	})
	mu.Lock()
	for p := range held {
		delete(issued, p) // forget them: only the bind check guards now
	}
	mu.Unlock()
	for range 500 {
		if p := Port(t); held[p] != nil {
			t.Fatalf("port %d is listened on but was handed out", p)
		}
	}
}

func TestBaseHandsOutFreePortsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	offsets := []int{0, 1, 20, 121}
	seen := map[int]bool{}
	for range 20 {
		base := Base(t, offsets...)
		for _, o := range offsets {
			p := base + o
			if p < lowest || p >= ephemeralStart() {
				t.Fatalf("port %d (base %d + %d) outside %d-%d", p, base, o, lowest, ephemeralStart()-1)
			}
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("listen on handed-out port %d: %v", p, err)
			}
			_ = ln.Close()
		}
	}
	// Port never hands out what Base did.
	for range 200 {
		if p := Port(t); seen[p] {
			t.Fatalf("Port handed out %d, which Base had", p)
		}
	}
}
