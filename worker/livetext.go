package worker

import (
	"context"
	"log/slog"

	"github.com/balletplanner/ballet/store"
	"github.com/balletplanner/ballet/tasks"
)

// liveText streams one model call's text to the session's watchers. Each
// publish carries the text from the last byte Redis confirmed, at its
// offset, under the call's attempt (the lease's fencing token and the
// call's try): a publish that failed is sent again with the next delta, one
// that timed out but ran is not appended twice, and a worker that lost its
// lease has its text dropped by the publish script.
type liveText struct {
	pub     *tasks.Publisher
	log     *slog.Logger
	session string
	turn    string
	attempt int64
	text    []byte
	sent    int64 // bytes of text the round holds
	dropped bool  // the round belongs to a newer attempt now
}

// add streams delta after the text so far.
func (l *liveText) add(ctx context.Context, delta string) {
	l.text = append(l.text, delta...)
	if l.dropped || int64(len(l.text)) == l.sent {
		return
	}
	n, err := l.pub.PublishText(ctx, tasks.TextDelta{Session: l.session, Turn: l.turn, Attempt: l.attempt,
		Offset: l.sent, Text: string(l.text[l.sent:])})
	switch {
	case err != nil:
		if ctx.Err() == nil {
			l.log.WarnContext(ctx, "publish text; sent again with the next", slog.Any("error", err))
		}
	case n == tasks.TextDropped:
		l.dropped = true
	case n == tasks.TextUnplaced:
		l.sent = int64(len(l.text))
	default:
		l.sent = min(n, int64(len(l.text)))
	}
}

// publish publishes outputs the attempt stored under its lease.
func (a *attempt) publish(ctx context.Context, outs ...store.Output) {
	ctx, span := startPublish(ctx, outs)
	a.w.d.Publisher.PublishFenced(ctx, tasks.LiveAttempt(a.fence.Token, 0), outs...)
	span.End()
}
