// Package porttest hands tests TCP ports for servers they start in another
// process: a ballet subprocess, a private Postgres or Redis.
//
// A port probed with "127.0.0.1:0" and closed again comes from the kernel's
// ephemeral range, the same range every outgoing connection on the machine
// draws its local port from, so a Redis or Postgres client may take it
// before the child binds it ("address already in use"). The ports handed
// out here lie below that range, where only a listener that asks for one
// by number can land, and one test binary never hands out the same port
// twice.
package porttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	// lowest is the first port handed out: above the registered services
	// a development machine runs (Postgres 5432, Redis 6379, 8080–8083, 9090).
	lowest = 10000
	// fallbackEphemeral is Linux's default first ephemeral port, used when
	// /proc does not say.
	fallbackEphemeral = 32768
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// Port returns a port on 127.0.0.1 that nothing listens on now, outside
// the ephemeral range, not handed out before by this test binary.
func Port(t testing.TB) int {
	t.Helper()
	p, err := Spare()
	if err != nil {
		t.Fatalf("porttest: %v", err)
	}
	return p
}

// Addr returns "127.0.0.1:<Port>".
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// Spare is Port for callers without a testing.TB.
func Spare() (int, error) {
	return pick(0)
}

// Base returns a base port B such that every B+offset is free now, lies
// below the ephemeral range and was not handed out before by this test
// binary, for a script that derives its ports from one base; the ports
// are marked handed out.
func Base(t testing.TB, offsets ...int) int {
	t.Helper()
	b, err := pick(offsets...)
	if err != nil {
		t.Fatalf("porttest: %v", err)
	}
	return b
}

// pick finds a base whose base+offset ports are all free and not handed
// out, below the ephemeral range, and marks them handed out.
func pick(offsets ...int) (int, error) {
	span := 0
	for _, o := range offsets {
		span = max(span, o)
	}
	high := ephemeralStart() - 1 - span
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		base := lowest + rand.IntN(high-lowest+1)
		if allFree(base, offsets) {
			for _, o := range offsets {
				issued[base+o] = true
			}
			return base, nil
		}
	}
	return 0, fmt.Errorf("no free ports at offsets %v of a base in %d-%d after 1000 tries", offsets, lowest, high)
}

// allFree reports whether every base+offset is free and not handed out.
// mu is held.
func allFree(base int, offsets []int) bool {
	for _, o := range offsets {
		if issued[base+o] {
			return false
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+o)))
		if err != nil {
			return false // taken by someone else
		}
		_ = ln.Close()
	}
	return true
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallbackEphemeral
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return fallbackEphemeral
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= lowest+1000 {
		return fallbackEphemeral
	}
	return n
}
