package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/balletplanner/ballet/api/rpcclient"
	"github.com/balletplanner/ballet/store"
)

// runPlainChat sends each line of in as a message and prints the outputs of
// the turns it sent as lines; at EOF it returns once they are all done.
// The lines are sent one after another in the order read, each once the
// server took the one before it, while the outputs keep being printed.
func runPlainChat(ctx context.Context, conn plannerConn, w watchFeed, states <-chan rpcclient.State,
	tgt chatTarget, in io.Reader, out io.Writer) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
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
	jobs := make(chan outgoing)
	results := make(chan sentMsg)
	go sendInOrder(ctx, conn, tgt.session.ID, jobs, results)
	mine := map[string]bool{} // the turns this chat sent
	open := map[string]bool{} // those without their done yet
	var queue []outgoing      // read, not yet handed to the sender
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
			if strings.TrimSpace(line) == "" {
				continue
			}
			turn := uuid.NewString()
			mine[turn], open[turn] = true, true
			queue = append(queue, outgoing{turn: turn, text: line})
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
				fmt.Fprintln(os.Stderr, "chat: connected")
			case rpcclient.Closed:
				states = nil
			default:
				fmt.Fprintln(os.Stderr, "chat: disconnected — reconnecting…")
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
			res, err := conn.Send(ctx, session, job.text, job.turn)
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
