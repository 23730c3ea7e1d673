package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/balletplanner/ballet/store"
)

// A planner watch or an event stream lasts as long as its client keeps it
// open, so the token and the permission it started with are checked again
// every server.stream_recheck, and at once when Postgres announces that
// its subject's access shrank (accessWatch): a token revoked, or a role
// binding removed, ends it within a second on every replica; an expired
// token within the interval. Its stream.closed (or, on an event stream,
// its closed event) says why.

// Why a recheck ends a watch or a stream.
const (
	recheckUnauthenticated = "unauthenticated" // the token is no longer valid
	recheckForbidden       = "forbidden"       // visible, but the permission is gone
	recheckNotFound        = "not_found"       // gone, or no longer visible: a new watch would be told the same
)

// recheck is one watch's or stream's check: who it runs for, and the
// permission check it started with.
type recheck struct {
	srv *Server
	// principal checks the token again and returns its principal as it is
	// now (its role bindings read again).
	principal func(ctx context.Context) (*store.Principal, error)
	// allowed is the check the watch or stream started with.
	allowed func(ctx context.Context, caller store.Caller) error
	what    string // for the log
	// wake is signalled when subject's access changed (nil: never).
	subject string
	wake    chan struct{}
}

// watchAccess makes r wake when its subject's access changes; release
// undoes it when the stream ends.
func (r recheck) watchAccess(subject string) recheck {
	if r.srv.access != nil {
		r.subject, r.wake = subject, r.srv.access.watch(subject)
	}
	return r
}

// release stops waking r.
func (r recheck) release() {
	if r.wake != nil {
		r.srv.access.unwatch(r.subject, r.wake)
	}
}

// recheckTimeout bounds one recheck.
const recheckTimeout = 10 * time.Second

// verdict runs the check: "" while the watch may go on, else the reason
// it ends. Postgres or the identity provider being unavailable ends
// nothing: the next check decides.
func (r recheck) verdict(parent context.Context) string {
	ctx, cancel := context.WithTimeout(parent, recheckTimeout)
	defer cancel()
	p, err := r.principal(ctx)
	if err == nil {
		err = r.allowed(ctx, store.HumanCaller(p))
	}
	switch {
	case err == nil:
		return ""
	case store.IsCode(err, store.CodeUnauthenticated):
		return recheckUnauthenticated
	case store.IsCode(err, store.CodeForbidden):
		return recheckForbidden
	case store.IsCode(err, store.CodeNotFound):
		return recheckNotFound
	}
	if parent.Err() == nil { // not the connection closing
		r.srv.log.Warn("stream recheck failed; the next one decides", slog.String("stream", r.what), slog.Any("error", err))
	}
	return ""
}

// sessionRecheck is the recheck of subject's watch of a planner session;
// the caller releases it.
func (s *Server) sessionRecheck(principal func(context.Context) (*store.Principal, error), subject, session string) recheck {
	return recheck{srv: s, principal: principal, what: "planner session " + session,
		allowed: func(ctx context.Context, caller store.Caller) error {
			_, err := s.db.WatchSession(ctx, caller, session)
			return err
		}}.watchAccess(subject)
}

// streamRecheck is the recheck of subject's event stream subscription;
// the caller releases it.
func (s *Server) streamRecheck(principal func(context.Context) (*store.Principal, error), subject, stream string) recheck {
	return recheck{srv: s, principal: principal, what: "event stream " + stream,
		allowed: func(ctx context.Context, caller store.Caller) error {
			_, err := s.db.ResolveStream(ctx, caller, stream)
			return err
		}}.watchAccess(subject)
}

// tokenPrincipal checks a token again, as identify did, but outside the
// failed-authentication limit: the server asks, not the client, and a
// token revoked under many watches must not lock its address out of
// authenticating with a new one.
func (s *Server) tokenPrincipal(token string) func(context.Context) (*store.Principal, error) {
	return func(ctx context.Context) (*store.Principal, error) {
		if s.auth.Mode == AuthLocal {
			return localPrincipal, nil
		}
		subject, err := s.subjectOf(ctx, token)
		if err != nil {
			return nil, err
		}
		return s.db.Principal(ctx, subject)
	}
}

// socketPrincipal checks a socket's current token (auth.refresh may have
// replaced it) as tokenPrincipal does; a socket whose token was found
// invalid meanwhile is unauthenticated.
func (c *rpcConn) socketPrincipal(ctx context.Context) (*store.Principal, error) {
	a := c.authState()
	if a == nil {
		return nil, store.Errorf(store.CodeUnauthenticated, "the socket is not authenticated")
	}
	p, err := c.srv.tokenPrincipal(a.token)(ctx)
	if store.IsCode(err, store.CodeUnauthenticated) {
		c.mu.Lock()
		if c.auth == a { // not replaced by an auth.refresh meanwhile
			c.auth = nil
		}
		c.mu.Unlock()
	}
	return p, err
}

// subject is the socket's authenticated subject ("" before auth).
func (c *rpcConn) subject() string {
	if p := c.principal(); p != nil {
		return p.Subject
	}
	return ""
}
