package worker

import "testing"

// ToolHooks are the test hooks of a session's tool calls.
type ToolHooks = toolHooks

// SetToolHooks sets the hooks of session's tool calls until t ends.
func SetToolHooks(t testing.TB, session string, h ToolHooks) {
	hooksBySession.Store(session, &h)
	t.Cleanup(func() { hooksBySession.Delete(session) })
}
