package main

import (
	"github.com/spf13/cobra"

	"github.com/balletplanner/ballet/chat"
)

// newChatCmd is `ballet chat`: its flags and help; chat.Run talks to the
// api.
func newChatCmd() *cobra.Command {
	var o chat.Options
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
			if err := o.Validate(); err != nil {
				return usageError{err.Error()}
			}
			return chat.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "base `URL` of the api")
	fs.StringVar(&o.Token, "token", "", "API `token` (default $BALLET_TOKEN, else the file "+chat.DemoTokenFile+" that make run writes)")
	fs.StringVar(&o.Project, "project", "", "`KEY` of the project (skips the project list)")
	fs.StringVar(&o.Session, "session", "", "`ID` of the planner session to continue (skips both lists)")
	fs.BoolVar(&o.New, "new", false, "start a new session instead of listing the existing ones")
	fs.BoolVar(&o.Plain, "plain", false, "plain line output even on a terminal")
	return c
}
