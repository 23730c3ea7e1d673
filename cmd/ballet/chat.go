package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// demoTokenFile is where `make run` leaves the demo token for `ballet chat`.
const demoTokenFile = ".dev/demo-token"

// chatOptions are the flags of `ballet chat`.
type chatOptions struct {
	url, token, project, session string
	newSession, plain            bool
}

// plannerConn is what the chat needs of the realtime connection.
type plannerConn interface {
	// SendMultitask sends text as turn; multitask "interrupt" stops the
	// session's open turns first, "" queues it behind them.
	SendMultitask(ctx context.Context, session, text, turn, multitask string) (rpcclient.SendResult, error)
	Cancel(ctx context.Context, session, turn string) error
}

// chatTarget is the session a chat talks to.
type chatTarget struct {
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

func newChatCmd() *cobra.Command {
	var o chatOptions
	c := &cobra.Command{
		Use:   "chat",
		Short: "talk to the planner of a running api in the terminal",
		Long: "Talk to the planner of a running api over its REST API and /rpc websocket. Without --project\n" +
			"and --session it lists the projects and sessions to pick from (plain mode starts a new\n" +
			"session). A new session is created when the first message is sent, titled from it. Enter\n" +
			"sends, Alt+Enter or Ctrl+J starts a new line, Ctrl-C cancels the running turn and a second\n" +
			"Ctrl-C quits. A changeset the planner proposes shows its operations, numbered: /apply applies\n" +
			"the latest one waiting for a decision, /apply 1,3 only those operations, /reject [reason]\n" +
			"rejects it, and /help lists the commands. When stdout is not a terminal (or with --plain) it\n" +
			"sends each line of stdin, prints \"session: ID\" first (to go on with --session ID), then the\n" +
			"answers as lines, and exits after the last turn at EOF; input without text sends nothing and\n" +
			"creates no session.",
		Example: "  ballet chat --project DEMO\n  echo 'plan the login page' | ballet chat --project DEMO --new --plain",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runChat(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.url, "url", "http://127.0.0.1:8080", "base `URL` of the api")
	fs.StringVar(&o.token, "token", "", "API `token` (default $BALLET_TOKEN, else the file "+demoTokenFile+" that make run writes)")
	fs.StringVar(&o.project, "project", "", "`KEY` of the project (skips the project list)")
	fs.StringVar(&o.session, "session", "", "`ID` of the planner session to continue (skips both lists)")
	fs.BoolVar(&o.newSession, "new", false, "start a new session instead of listing the existing ones")
	fs.BoolVar(&o.plain, "plain", false, "plain line output even on a terminal")
	return c
}

// runChat is `ballet chat`. Piped, it prints the answers on out and the
// connection's state and its notes on errOut.
func runChat(ctx context.Context, o chatOptions, out, errOut io.Writer) error {
	if o.session != "" && o.newSession {
		return usageError{"chat: --session and --new exclude each other"}
	}
	u, err := url.Parse(o.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Sprintf("chat: --url %q: must be an http:// or https:// URL of the api", o.url)}
	}
	token, err := chatToken(o.token)
	if err != nil {
		return err
	}
	rest := newRESTClient(o.url, token)
	plain := o.plain || !isTerminal(os.Stdout) || !isTerminal(os.Stdin)
	var tgt chatTarget
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
	return runChatTUI(ctx, c, rest, tgt)
}

// chatToken is --token, else $BALLET_TOKEN, else the demo token file.
func chatToken(flagToken string) (string, error) {
	if t := strings.TrimSpace(flagToken); t != "" {
		return t, nil
	}
	if t := strings.TrimSpace(os.Getenv("BALLET_TOKEN")); t != "" {
		return t, nil
	}
	b, err := os.ReadFile(demoTokenFile)
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("chat: read %s: %w", demoTokenFile, err)
	}
	return "", errors.New("chat: no API token: pass --token, set $BALLET_TOKEN, or run `make run` in this directory " +
		"(it writes the demo token to " + demoTokenFile + "); `ballet admin token create` makes one")
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
func plainTarget(ctx context.Context, rest *restClient, o chatOptions) (chatTarget, error) {
	if o.session != "" {
		return sessionTarget(ctx, rest, o.session)
	}
	p, list, err := projectFromFlags(ctx, rest, o.project)
	if err != nil {
		return chatTarget{}, err
	}
	if p.Key == "" {
		keys := make([]string, len(list))
		for i, q := range list {
			keys[i] = q.Key
		}
		return chatTarget{}, fmt.Errorf("chat: the token sees several projects (%s): pass --project", strings.Join(keys, ", "))
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
func sessionTarget(ctx context.Context, rest *restClient, id string) (chatTarget, error) {
	s, err := rest.session(ctx, id)
	if err != nil {
		return chatTarget{}, err
	}
	p, err := rest.project(ctx, s.Project)
	if err != nil {
		return chatTarget{}, err
	}
	return chatTarget{project: p, session: s, human: humanTexts(s)}, nil
}

// newSessionTarget is a new session of p, which the chat creates when the
// human sends the first message, so that a chat left before it leaves no
// empty session behind.
func newSessionTarget(p store.Project) chatTarget {
	return chatTarget{project: p, human: map[string]string{}}
}
