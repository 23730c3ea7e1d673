// Package chat is `ballet chat`, the terminal client of the planner: it
// talks to a running api over its REST API and the /rpc websocket
// (api/rpcclient), as a Bubble Tea screen on a terminal and as lines when
// piped.
package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// DemoTokenFile is where `make run` leaves the demo token for `ballet
// chat`, relative to the working directory.
const DemoTokenFile = ".dev/demo-token"

// Options are the flags of `ballet chat`.
type Options struct {
	// URL is the base URL of the api, http:// or https://.
	URL string
	// Token is the API token; "" takes $BALLET_TOKEN, else DemoTokenFile.
	Token string
	// Project is the key of the project (skips the project list).
	Project string
	// Session is the id of the planner session to continue (skips both
	// lists).
	Session string
	// New starts a new session instead of listing the existing ones.
	New bool
	// Plain prints lines even on a terminal.
	Plain bool
}

// Validate refuses options that exclude each other and a URL that is not
// an http:// or https:// one. Its errors are mistakes of the command line.
func (o Options) Validate() error {
	if o.Session != "" && o.New {
		return errors.New("chat: --session and --new exclude each other")
	}
	if _, err := apiURL(o.URL); err != nil {
		return err
	}
	return nil
}

// apiURL parses the api's base URL.
func apiURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("chat: --url %q: must be an http:// or https:// URL of the api", raw)
	}
	return u, nil
}

// plannerConn is what the chat needs of the realtime connection.
type plannerConn interface {
	// SendMultitask sends text as turn; multitask "interrupt" stops the
	// session's open turns first, "" queues it behind them.
	SendMultitask(ctx context.Context, session, text, turn, multitask string) (rpcclient.SendResult, error)
	Cancel(ctx context.Context, session, turn string) error
}

// target is the session a chat talks to.
type target struct {
	project store.Project
	// session has no ID yet for a new session: the first message creates
	// it (see sessionTitle).
	session store.Session
	// human maps each turn to the text its human sent.
	human map[string]string
	// history is the session's stored outputs when the chat opened it,
	// shown before the first screen; the watch follows after the last.
	history []rpcclient.Output
}

// Run is `ballet chat`. When stdin and stdout are both terminals (and
// not o.Plain) it lets the human pick the project and session and runs
// the chat screen until they quit; otherwise it sends each line of stdin
// and prints the answers as lines on out, and the connection's state and
// its notes on errOut.
func Run(ctx context.Context, o Options, out, errOut io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	u, err := apiURL(o.URL)
	if err != nil {
		return err
	}
	token, err := resolveToken(o.Token)
	if err != nil {
		return err
	}
	rest := newRESTClient(o.URL, token)
	plain := o.Plain || !isTerminal(os.Stdout) || !isTerminal(os.Stdin)
	var tgt target
	if plain {
		tgt, err = plainTarget(ctx, rest, o)
	} else {
		tgt, err = pickTarget(ctx, rest, o)
	}
	if err != nil {
		return err
	}
	if tgt.project.Key == "" {
		return nil // the human left the picker
	}
	dial := func(ctx context.Context) (*rpcclient.Client, error) {
		c, err := rpcclient.Dial(ctx, rpcURL(u), rpcclient.JSON, token, &rpcclient.Options{Reconnect: true})
		if err != nil {
			return nil, fmt.Errorf("chat: connect: %w", err)
		}
		return c, nil
	}
	if plain {
		return runPiped(ctx, dial, rest, tgt, os.Stdin, out, errOut)
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return runScreen(ctx, c, rest, tgt)
}

// resolveToken is --token, else $BALLET_TOKEN, else the demo token file.
func resolveToken(flagToken string) (string, error) {
	if t := strings.TrimSpace(flagToken); t != "" {
		return t, nil
	}
	if t := strings.TrimSpace(os.Getenv("BALLET_TOKEN")); t != "" {
		return t, nil
	}
	b, err := os.ReadFile(DemoTokenFile)
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("chat: read %s: %w", DemoTokenFile, err)
	}
	return "", errors.New("chat: no API token: pass --token, set $BALLET_TOKEN, or run `make run` in this directory " +
		"(it writes the demo token to " + DemoTokenFile + "); `ballet admin token create` makes one")
}

// rpcURL is the /rpc websocket of the api at u.
func rpcURL(u *url.URL) string {
	w := *u
	w.Scheme = "ws"
	if u.Scheme == "https" {
		w.Scheme = "wss"
	}
	w.Path = strings.TrimRight(u.Path, "/") + "/rpc"
	w.RawQuery, w.Fragment = "", ""
	return w.String()
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// plainTarget finds the session without asking: --session, else a new one
// (created by the first message) in --project or the only project the
// token sees.
func plainTarget(ctx context.Context, rest *restClient, o Options) (target, error) {
	if o.Session != "" {
		return sessionTarget(ctx, rest, o.Session)
	}
	p, list, err := projectFromFlags(ctx, rest, o.Project)
	if err != nil {
		return target{}, err
	}
	if p.Key == "" {
		keys := make([]string, len(list))
		for i, q := range list {
			keys[i] = q.Key
		}
		return target{}, fmt.Errorf("chat: the token sees several projects (%s): pass --project", strings.Join(keys, ", "))
	}
	return newSessionTarget(p), nil
}

// projectFromFlags loads --project, or the only project the token sees;
// otherwise it returns the list to pick from.
func projectFromFlags(ctx context.Context, rest *restClient, key string) (store.Project, []store.Project, error) {
	if key != "" {
		p, err := rest.project(ctx, key)
		return p, nil, err
	}
	list, err := rest.projects(ctx)
	switch {
	case err != nil:
		return store.Project{}, nil, err
	case len(list) == 0:
		return store.Project{}, nil, errors.New("chat: the token sees no project; ask an admin for a role binding")
	case len(list) == 1:
		return list[0], nil, nil
	}
	return store.Project{}, list, nil
}

// sessionTarget is the existing session id, with its messages.
func sessionTarget(ctx context.Context, rest *restClient, id string) (target, error) {
	s, err := rest.session(ctx, id)
	if err != nil {
		return target{}, err
	}
	p, err := rest.project(ctx, s.Project)
	if err != nil {
		return target{}, err
	}
	return target{project: p, session: s, human: humanTexts(s)}, nil
}

// newSessionTarget is a new session of p, which the chat creates when the
// human sends the first message, so that a chat left before it leaves no
// empty session behind.
func newSessionTarget(p store.Project) target {
	return target{project: p, human: map[string]string{}}
}
