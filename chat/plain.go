package chat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// runPiped is `ballet chat` piped: it reads stdin up to its first line
// with text, so that input without any connects to nothing and creates no
// session; then it connects, creates the session of a new chat titled
// from that line, prints "session: ID" first on out, and runs
// runPlain.
func runPiped(ctx context.Context, dial func(context.Context) (*rpcclient.Client, error), rest *restClient,
	tgt target, in io.Reader, out, errOut io.Writer) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	lines := readLines(ctx, in)
	first, ok, err := firstMessage(ctx, lines)
	switch {
	case err != nil:
		return err
	case !ok:
		fmt.Fprintln(errOut, "chat: nothing to send")
		return nil
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if tgt.session.ID == "" {
		if tgt.session, err = rest.createSession(ctx, tgt.project.Key, sessionTitle(first, time.Now())); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "session: "+tgt.session.ID)
	w, err := watchSession(ctx, c, tgt.session.ID, 0)
	if err != nil {
		return err
	}
	return runPlain(ctx, c, w, c.States(), tgt, plainIO{first: first, lines: lines, out: out, errOut: errOut})
}

// readLines delivers the lines of in, read in a goroutine of its own,
// and closes the channel at the end of in; it stops early when ctx ends.
func readLines(ctx context.Context, in io.Reader) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines
}

// firstMessage waits for the first line of lines with text; ok is false
// when lines end without one.
func firstMessage(ctx context.Context, lines <-chan string) (first string, ok bool, err error) {
	for {
		select {
		case line, open := <-lines:
			if !open {
				return "", false, nil
			}
			if strings.TrimSpace(line) != "" {
				return line, true, nil
			}
		case <-ctx.Done():
			return "", false, errors.New("chat: interrupted")
		}
	}
}

// plainIO is the human's side of a piped chat.
type plainIO struct {
	// first is the first message, read before the session was opened
	// ("" when none was); lines are the lines of stdin after it.
	first string
	lines <-chan string
	// out gets the turns' lines, errOut the connection's state.
	out, errOut io.Writer
}

// runPlain sends first and then each line of lines as a message, and
// prints the outputs of the turns it sent as lines; at the end of lines it
// returns once they are all done. The lines are sent one after another in
// the order read, each once the server took the one before it, while the
// outputs keep being printed.
func runPlain(ctx context.Context, conn plannerConn, w watchFeed, states <-chan rpcclient.State,
	tgt target, pio plainIO) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	lines, out := pio.lines, pio.out
	jobs := make(chan outgoing)
	results := make(chan sentMsg)
	go sendInOrder(ctx, conn, tgt.session.ID, jobs, results)
	mine := map[string]bool{} // the turns this chat sent
	open := map[string]bool{} // those without their done yet
	var queue []outgoing      // read, not yet handed to the sender
	add := func(text string) {
		turn := uuid.NewString()
		mine[turn], open[turn] = true, true
		queue = append(queue, outgoing{turn: turn, text: text})
	}
	if strings.TrimSpace(pio.first) != "" {
		add(pio.first)
	}
	eof := false
	for {
		var toSender chan<- outgoing
		var next outgoing
		if len(queue) > 0 {
			toSender, next = jobs, queue[0]
		}
		select {
		case line, ok := <-lines:
			if !ok {
				lines, eof = nil, true
				if len(open) == 0 {
					return nil
				}
				continue
			}
			if strings.TrimSpace(line) != "" {
				add(line)
			}
		case toSender <- next:
			queue = queue[1:]
		case r := <-results:
			if r.err != nil && ctx.Err() == nil {
				return fmt.Errorf("chat: send: %w", r.err)
			}
			if r.res.Turn != "" && r.res.Turn != r.turn {
				delete(open, r.turn)
				mine[r.res.Turn], open[r.res.Turn] = true, true
			}
		case o, ok := <-w.Outputs():
			if !ok {
				if err := w.Err(); err != nil {
					return fmt.Errorf("chat: watch ended: %w", err)
				}
				return errors.New("chat: watch ended")
			}
			if !mine[o.Turn] {
				continue
			}
			if line := plainLine(o); line != "" {
				fmt.Fprintln(out, line)
			}
			if o.Type == store.OutputDone {
				delete(open, o.Turn)
				if eof && len(open) == 0 {
					return nil
				}
			}
		case s := <-states:
			switch s {
			case rpcclient.Connected:
				fmt.Fprintln(pio.errOut, "chat: connected")
			case rpcclient.Closed:
				states = nil
			default:
				fmt.Fprintln(pio.errOut, "chat: disconnected — reconnecting…")
			}
		case <-ctx.Done():
			if len(open) > 0 {
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := conn.Cancel(cctx, tgt.session.ID, "")
				cancel()
				if err != nil {
					return fmt.Errorf("chat: interrupted; cancel the running turns: %w", err)
				}
				return errors.New("chat: interrupted; the session's open turns were cancelled")
			}
			return errors.New("chat: interrupted")
		}
	}
}

// sendInOrder sends the messages of jobs one after another until ctx ends,
// and reports each one's result on results before it takes the next. A
// failure worth another try (sendRetry) is tried again with the same turn
// id after a wait.
func sendInOrder(ctx context.Context, conn plannerConn, session string, jobs <-chan outgoing, results chan<- sentMsg) {
	for {
		var job outgoing
		select {
		case job = <-jobs:
		case <-ctx.Done():
			return
		}
		for {
			res, err := conn.SendMultitask(ctx, session, job.text, job.turn, "")
			hint, retry := sendRetry(err)
			if err == nil || !retry || ctx.Err() != nil {
				select {
				case results <- sentMsg{turn: job.turn, res: res, err: err}:
				case <-ctx.Done():
					return
				}
				break
			}
			job.tries++
			t := time.NewTimer(retryWait(sendRetryBase, job.tries, hint))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// plainLine is the line printed for an output, or "" for a quiet one.
func plainLine(o rpcclient.Output) string {
	switch o.Type {
	case store.OutputMessage:
		if o.Role != "assistant" {
			return ""
		}
		if text := blocksText(o.Content); text != "" {
			return "assistant: " + text
		}
	case store.OutputToolResult:
		if o.IsError {
			return fmt.Sprintf("tool %s: error: %s", o.Tool, firstLine(o.Text))
		}
		return fmt.Sprintf("tool %s: ok", o.Tool)
	case store.OutputQueued:
		if o.Position != nil && *o.Position > 0 {
			return fmt.Sprintf("queued (position %d)", *o.Position)
		}
	case store.OutputCompacted:
		return "compacted: earlier messages were summarized"
	case store.OutputError:
		return "error: " + o.Text
	case store.OutputDone:
		return "done: " + o.Text
	}
	return ""
}

// blocksText joins the text blocks of a stored message's content.
func blocksText(raw json.RawMessage) string {
	var blocks []store.Block
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		if b.Type == store.BlockText && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// firstLine is s up to its first newline, at most 200 runes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > 200 {
		return string(r[:200]) + "…"
	}
	return s
}
