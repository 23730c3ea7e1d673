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

// plainClient is what plain mode needs of the connection.
type plainClient interface {
	plannerConn
	Watch(ctx context.Context, session string, fromCursor int64) (*rpcclient.Watch, error)
	States() <-chan rpcclient.State
}

// runPlainChat sends each line of in as a message and prints the outputs of
// the turns it sent as lines; at EOF it returns once they are all done.
func runPlainChat(ctx context.Context, c plainClient, tgt chatTarget, in io.Reader, out io.Writer) error {
	w, err := c.Watch(ctx, tgt.session.ID, 0)
	if err != nil {
		return fmt.Errorf("chat: watch session %s: %w", tgt.session.ID, err)
	}
	defer w.Close()
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
	mine := map[string]bool{} // the turns this chat sent
	open := map[string]bool{} // those without their done yet
	eof := false
	states := c.States()
	for {
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
			res, err := c.Send(ctx, tgt.session.ID, line, turn)
			if err != nil {
				return fmt.Errorf("chat: send: %w", err)
			}
			if res.Turn != "" && res.Turn != turn {
				delete(open, turn)
				mine[res.Turn], open[res.Turn] = true, true
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
				err := c.Cancel(cctx, tgt.session.ID, "")
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
