package chat

import (
	"context"
	"errors"
	"reflect"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/balletplanner/ballet/api/rpcclient"
)

// Waits between two tries of a send the server did not take.
const (
	// sendRetryBase is the wait after a send's first failure; it doubles
	// with each failure after it.
	sendRetryBase = 250 * time.Millisecond
	// sendRetryMax caps the wait between two tries.
	sendRetryMax = 5 * time.Second
)

// outgoing is a message typed here and not yet taken by the server.
type outgoing struct {
	// turn is the client turn id it is sent with, the same on every try,
	// so that the server takes it once.
	turn, text string
	// multitask is "interrupt" for a message that stops the open turns.
	multitask string
	// tries counts its failed sends.
	tries int
}

// outbox holds the messages typed here in the order typed. Only its first
// message is ever being sent: the next one goes once the server took it
// (or refused it for good), so that messages reach the server in the
// order they were typed, across a reconnect too.
type outbox struct {
	queue []outgoing
	// sending says the first message's send is running or waiting to try
	// again.
	sending bool
}

// Messages of the outbox.
type (
	// sentMsg is the result of a send of the outbox's first message.
	sentMsg struct {
		turn string
		res  rpcclient.SendResult
		err  error
	}
	// resendMsg tries the outbox's first message again after a wait.
	resendMsg struct{ turn string }
)

// queueSend adds the composer's text to the outbox and starts sending it
// unless an earlier message is on its way.
func (m *model) queueSend(turn, text, multitask string) tea.Cmd {
	m.out.queue = append(m.out.queue, outgoing{turn: turn, text: text, multitask: multitask})
	return m.sendNext()
}

// sendNext sends the outbox's first message when nothing is being sent;
// in a new chat it first opens the session.
func (m *model) sendNext() tea.Cmd {
	if m.out.sending || len(m.out.queue) == 0 {
		return nil
	}
	if m.tgt.session.ID == "" {
		return m.openSession()
	}
	m.out.sending = true
	next := m.out.queue[0]
	conn, ctx, session := m.conn, m.ctx, m.tgt.session.ID
	return func() tea.Msg {
		res, err := conn.SendMultitask(ctx, session, next.text, next.turn, next.multitask)
		return sentMsg{turn: next.turn, res: res, err: err}
	}
}

// sent takes the result of the first message's send: on success, or a
// refusal for good (shown under the message), the next message goes; a
// failure worth another try keeps the message first and tries it again,
// with its turn id, after a wait.
func (m *model) sent(msg sentMsg) tea.Cmd {
	if len(m.out.queue) == 0 || m.out.queue[0].turn != msg.turn {
		return nil // no send of this message is running
	}
	head := &m.out.queue[0]
	if msg.err != nil {
		if hint, ok := sendRetry(msg.err); ok && m.state != rpcclient.Closed && m.ctx.Err() == nil {
			head.tries++
			m.notice = "will send again: " + msg.err.Error()
			turn := head.turn
			return tea.Tick(retryWait(m.retryBase, head.tries, hint), func(time.Time) tea.Msg { return resendMsg{turn: turn} })
		}
		delete(m.open, msg.turn)
		m.tr.note(msg.turn, "✗ not sent: "+msg.err.Error())
	} else {
		m.notice = ""
		if msg.res.Turn != "" && msg.res.Turn != msg.turn {
			// The server gave the message a turn id of its own.
			if m.open[msg.turn] {
				delete(m.open, msg.turn)
				m.open[msg.res.Turn] = true
			}
			m.tr.rename(msg.turn, msg.res.Turn)
		}
	}
	m.out.queue = m.out.queue[1:]
	m.out.sending = false
	return m.sendNext()
}

// resend tries the outbox's first message again.
func (m *model) resend(msg resendMsg) tea.Cmd {
	if len(m.out.queue) == 0 || m.out.queue[0].turn != msg.turn {
		return nil
	}
	m.out.sending = false
	return m.sendNext()
}

// sendRetry says whether a failed send is worth another try with the same
// turn id: the connection was lost, or the server asked to come back
// later; hint is the wait the server asked for (0: none said).
func sendRetry(err error) (hint time.Duration, ok bool) {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 0, false
	case errors.Is(err, rpcclient.ErrDisconnected):
		return 0, true
	}
	var re *rpcclient.Error
	if !errors.As(err, &re) {
		return 0, false
	}
	switch code, _ := re.Data["code"].(string); code {
	case "unavailable", "resource_exhausted":
	default:
		return 0, false
	}
	var secs float64
	switch v := reflect.ValueOf(re.Data["retry_after"]); {
	case v.CanInt():
		secs = float64(v.Int())
	case v.CanUint():
		secs = float64(v.Uint())
	case v.CanFloat():
		secs = v.Float()
	}
	return time.Duration(secs * float64(time.Second)), true
}

// retryWait is the wait before the next try of a send that failed tries
// times: the server's hint, else base doubled with each failure, capped.
func retryWait(base time.Duration, tries int, hint time.Duration) time.Duration {
	if hint > 0 {
		return min(hint, sendRetryMax)
	}
	if base <= 0 {
		base = sendRetryBase
	}
	d := base
	for i := 1; i < tries && d < sendRetryMax; i++ {
		d *= 2
	}
	return min(d, sendRetryMax)
}
