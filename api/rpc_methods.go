package api

import (
	"context"
	"encoding/base64"
	stdjson "encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/balletplanner/ballet/store"
)

// Methods of /rpc.
const (
	methodAuth       = "auth"
	methodRefresh    = "auth.refresh"
	methodHeartbeat  = "$/heartbeat"
	methodPing       = "system.ping"
	methodSend       = "planner.send"
	methodCancel     = "planner.cancel"
	methodWatch      = "planner.watch"
	rpcMethodTimeout = 30 * time.Second
)

func isAuthMethod(m string) bool { return m == methodAuth || m == methodRefresh }

// rpcAuth is a socket's authentication: the token is kept to check it
// again on each planner call (a revoked or expired token stops working).
type rpcAuth struct {
	token     string
	principal *store.Principal
	expiresAt *time.Time // nil when the token does not say (API tokens)
}

func (c *rpcConn) principal() *store.Principal {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.auth == nil {
		return nil
	}
	return c.auth.principal
}

func (c *rpcConn) authState() *rpcAuth {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.auth
}

func (c *rpcConn) setAuth(a *rpcAuth) {
	c.mu.Lock()
	c.auth = a
	c.mu.Unlock()
}

type tokenParams struct {
	Token string `json:"token"`
}

type authResult struct {
	Subject   string  `json:"subject"`
	ExpiresAt *string `json:"expires_at"`
}

type heartbeatParams struct {
	Time string `json:"time,omitempty"`
}

type pingResult struct {
	Time    string `json:"time"`
	Subject string `json:"subject"`
}

type rpcSendParams struct {
	Session string  `json:"session"`
	Text    string  `json:"text"`
	Turn    *string `json:"turn,omitempty"`
	// Priority is interactive (the default) or batch.
	Priority string `json:"priority,omitempty"`
	// Traceparent and Tracestate are the client's W3C trace context: the
	// turn's spans join the client's trace (ours; a new trace without).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// Multitask is enqueue (the default), reject or interrupt.
	Multitask string `json:"multitask,omitempty"`
	// Webhook is a URL POSTed once the turn ends, as in the REST send.
	Webhook *string `json:"webhook,omitempty"`
}

type rpcCancelParams struct {
	Session string `json:"session"`
	Turn    string `json:"turn,omitempty"`
}

// call runs one method; a nil result answers {}.
func (c *rpcConn) call(req rpcRequest) (any, error) {
	ctx, cancel := context.WithTimeout(c.ctx, rpcMethodTimeout)
	defer cancel()
	switch req.Method {
	case methodAuth, methodRefresh:
		var p tokenParams
		if err := decodeParams(req.Params, &p); err != nil {
			return nil, err
		}
		return c.authenticate(ctx, req.Method, p.Token)
	}
	a := c.authState()
	if a == nil {
		return nil, store.Errorf(store.CodeUnauthenticated, "not authenticated: send auth {token} first")
	}
	if a.expiresAt != nil && time.Now().After(*a.expiresAt) {
		return nil, store.Errorf(store.CodeUnauthenticated, "the token expired at %s: send auth.refresh {token}", a.expiresAt.UTC().Format(time.RFC3339))
	}
	switch req.Method {
	case methodHeartbeat:
		var p heartbeatParams
		return nil, decodeParams(req.Params, &p)
	case methodPing:
		if err := decodeParams(req.Params, &struct{}{}); err != nil {
			return nil, err
		}
		return pingResult{Time: time.Now().UTC().Format(time.RFC3339Nano), Subject: a.principal.Subject}, nil
	case methodWatch:
		if c.srv.hub == nil {
			break
		}
		return c.watch(ctx, req)
	case methodSubscribe, methodUnsubscribe:
		if c.srv.events == nil {
			break
		}
		return c.streamCall(ctx, req)
	case methodSend, methodCancel:
		if c.srv.planner == nil {
			break
		}
		return c.plannerCall(ctx, req)
	}
	return nil, &rpcProtocolError{RPCError{Code: RPCMethodNotFound, Message: "method not found: " + strconv.Quote(req.Method)}}
}

// rpcProtocolError is an error of the protocol itself, sent as it is.
type rpcProtocolError struct{ RPCError }

func (e *rpcProtocolError) Error() string { return e.Message }

// plannerCall runs planner.send and planner.cancel as the socket's human,
// whose token is checked again first.
func (c *rpcConn) plannerCall(ctx context.Context, req rpcRequest) (any, error) {
	var session string
	var send rpcSendParams
	var cancel rpcCancelParams
	if req.Method == methodSend {
		if err := decodeParams(req.Params, &send); err != nil {
			return nil, err
		}
		session = send.Session
	} else {
		if err := decodeParams(req.Params, &cancel); err != nil {
			return nil, err
		}
		session = cancel.Session
	}
	if session == "" {
		return nil, store.Errorf(store.CodeInvalid, "params: field session: required")
	}
	p, err := c.recheck(ctx)
	if err != nil {
		return nil, err
	}
	if req.Method == methodSend {
		turn, err := clientTurn(send.Turn)
		if err != nil {
			return nil, err
		}
		hook, err := c.srv.checkWebhook(ctx, send.Webhook)
		if err != nil {
			return nil, err
		}
		tctx, err := clientTrace(ctx, send.Traceparent, send.Tracestate)
		if err != nil {
			return nil, err
		}
		return c.srv.planner.Submit(tctx, store.HumanCaller(p), store.SendRequest{Session: session, Text: send.Text,
			Turn: turn, Priority: send.Priority, Multitask: send.Multitask, Webhook: hook})
	}
	if _, err := c.srv.planner.Cancel(ctx, store.HumanCaller(p), session, cancel.Turn); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// authenticate answers auth and auth.refresh.
func (c *rpcConn) authenticate(ctx context.Context, method, token string) (any, error) {
	cur := c.authState()
	switch {
	case method == methodAuth && cur != nil:
		return nil, store.Errorf(store.CodeInvalid, "already authenticated as %q: use auth.refresh to replace the token", cur.principal.Subject)
	case method == methodRefresh && cur == nil:
		return nil, store.Errorf(store.CodeUnauthenticated, "not authenticated: send auth {token} first")
	case strings.TrimSpace(token) == "" && c.srv.auth.Mode != AuthLocal:
		return nil, store.Errorf(store.CodeInvalid, "params: field token: required")
	}
	a, err := c.srv.rpcAuthenticate(ctx, c.ip, token)
	if err != nil {
		return nil, err
	}
	if cur != nil && cur.principal.Subject != a.principal.Subject {
		return nil, store.Errorf(store.CodeForbidden, "auth.refresh must keep the subject %q; the token is another subject's", cur.principal.Subject)
	}
	if err := c.takeShare(a.principal); err != nil {
		return nil, err
	}
	c.setAuth(a)
	res := authResult{Subject: a.principal.Subject}
	if a.expiresAt != nil {
		s := a.expiresAt.UTC().Format(time.RFC3339)
		res.ExpiresAt = &s
	}
	return res, nil
}

// recheck authenticates the socket's token again and returns its current
// principal (role bindings as they are now).
func (c *rpcConn) recheck(ctx context.Context) (*store.Principal, error) {
	cur := c.authState()
	a, err := c.srv.rpcAuthenticate(ctx, c.ip, cur.token)
	if err != nil {
		if store.IsCode(err, store.CodeUnauthenticated) {
			c.setAuth(nil)
			return nil, store.Errorf(store.CodeUnauthenticated, "the token is no longer valid (%s): send auth {token} again", store.AsError(err).Message)
		}
		return nil, err
	}
	return a.principal, nil
}

// rpcAuthenticate is identify for a socket: the same tokens, the same
// failed-authentication limit (checkToken); a limited failure carries its
// wait in data.retry_after.
func (s *Server) rpcAuthenticate(ctx context.Context, ip, token string) (*rpcAuth, error) {
	if s.auth.Mode == AuthLocal {
		return &rpcAuth{token: token, principal: localPrincipal}, nil
	}
	subject, err := s.checkToken(ctx, ip, token)
	if err != nil {
		return nil, err
	}
	p, err := s.db.Principal(ctx, subject)
	if err != nil {
		return nil, err
	}
	return &rpcAuth{token: token, principal: p, expiresAt: jwtExpiry(token)}, nil
}

// jwtExpiry reads the exp claim of a JWT that was verified already; nil
// for an API token.
func jwtExpiry(token string) *time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if stdjson.Unmarshal(raw, &claims) != nil || claims.Exp == 0 {
		return nil
	}
	t := time.Unix(claims.Exp, 0)
	return &t
}
