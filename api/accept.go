package api

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// patientListener keeps accepting when the process runs out of file
// descriptors (EMFILE, ENFILE) or kernel buffers: fasthttp takes any
// Accept error that is not a timeout for the end of the listener and stops
// serving for good, so such an error never reaches it. Accept waits,
// doubling from 5 ms up to 1 s, and tries again until a descriptor frees
// up; the connection that could not be accepted stays in the kernel's
// backlog meanwhile. It logs the first failure of a run and the recovery.
type patientListener struct {
	net.Listener
	log     *slog.Logger
	stalled *atomic.Int64 // Accept errors waited out, for the metric
}

// acceptWaitMax caps one wait of a stalled Accept.
const acceptWaitMax = time.Second

func (l patientListener) Accept() (net.Conn, error) {
	wait := 5 * time.Millisecond
	failing := false
	for {
		c, err := l.Listener.Accept()
		if err == nil || !exhausted(err) {
			if failing && err == nil {
				l.log.Warn("api: accepting connections again")
			}
			return c, err
		}
		if !failing {
			l.log.Error("api: cannot accept a connection; waiting for a file descriptor to free up", slog.Any("error", err))
			failing = true
		}
		if l.stalled != nil {
			l.stalled.Add(1)
		}
		time.Sleep(wait)
		wait = min(2*wait, acceptWaitMax)
	}
}

// exhausted reports whether an Accept error is a resource the process or
// the system may get back: descriptors or memory.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
