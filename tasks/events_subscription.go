package tasks

import (
	"context"

	"github.com/balletplanner/ballet/store"
)

// EventSub is one subscriber of an event stream: the events after its
// starting number, replayed from the log, then the live ones, in order,
// with no gap and no duplicate.
type EventSub struct {
	hub    *EventHub
	stream store.Stream
	seq    int64
	events chan store.Event
	done   chan struct{}
	err    error // set before done is closed

	last int64 // the organization's number it has been offered up to; hub.mu
}

// Subscribe resolves a stream (project:<KEY> or item:<KEY>, tracker.read on
// the project) and follows it. With fromSeq it first replays the stream's
// events numbered after it (more than store.MaxReplay is
// store.CodeResyncRequired); without, it starts at the latest event. ctx
// bounds the set-up only; the subscription lasts until Close, lagging or
// Stop.
func (h *EventHub) Subscribe(ctx context.Context, caller store.Caller, stream string, fromSeq *int64) (*EventSub, error) {
	if fromSeq != nil && *fromSeq < 0 {
		return nil, store.Errorf(store.CodeInvalid, "from_seq: must be a non-negative integer, got %d", *fromSeq)
	}
	st, err := h.db.ResolveStream(ctx, caller, stream)
	if err != nil {
		return nil, err
	}
	// Every event numbered up to latest is committed (numbers follow commit
	// order under the organization's counter lock): the replay reads them
	// and the hub delivers what comes after.
	latest, err := h.db.LatestEventSeq(ctx, st.OrganizationID)
	if err != nil {
		return nil, err
	}
	s := &EventSub{hub: h, stream: st, seq: latest, last: latest,
		events: make(chan store.Event, EventBuffer), done: make(chan struct{})}
	if fromSeq != nil {
		if err := s.replay(ctx, *fromSeq); err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return nil, store.Errorf(store.CodeUnavailable, "event streams are unavailable: %v", ErrHubStopped)
	}
	subs := h.orgs[st.OrganizationID]
	if subs == nil {
		subs = map[*EventSub]struct{}{}
		h.orgs[st.OrganizationID] = subs
	}
	subs[s] = struct{}{}
	h.mu.Unlock()
	// A notification heard before the subscriber joined was not for it:
	// read what may have committed since latest.
	h.mark(st.OrganizationID, 0)
	return s, nil
}

// replay queues the stream's events after fromSeq up to the latest number.
func (s *EventSub) replay(ctx context.Context, fromSeq int64) error {
	if fromSeq > s.seq {
		return store.Errorf(store.CodeResyncRequired,
			"from_seq %d is past the latest event %d of this stream's organization: reload and subscribe without from_seq", fromSeq, s.seq)
	}
	if err := s.hub.db.CheckEventSeq(ctx, s.stream.OrganizationID, fromSeq); err != nil {
		return err
	}
	events, err := s.hub.db.EventsAfter(ctx, s.stream.OrganizationID, s.stream.Filter, fromSeq, store.MaxReplay+1)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range events {
		if e.Seq <= s.seq {
			n++
		}
	}
	if n > store.MaxReplay {
		return store.Errorf(store.CodeResyncRequired,
			"more than %d events of %s came after seq %d: reload and subscribe without from_seq", store.MaxReplay, s.stream.Name, fromSeq)
	}
	for _, e := range events[:n] {
		s.events <- e // fits: MaxReplay < EventBuffer, and nobody else sends yet
	}
	return nil
}

// Stream is the resolved stream.
func (s *EventSub) Stream() store.Stream { return s.stream }

// Seq is the organization's latest event number when the subscription
// began: the replay ends there and live events follow it.
func (s *EventSub) Seq() int64 { return s.seq }

// Events delivers the events in order. It is closed when the subscription
// ends; what was queued before stays readable.
func (s *EventSub) Events() <-chan store.Event { return s.events }

// Done is closed when the subscription ends.
func (s *EventSub) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended: nil after Close, ErrLagging (the
// subscriber fell more than EventBuffer events behind: subscribe again from
// the last seq received) or ErrHubStopped. It is nil while it runs.
func (s *EventSub) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close ends the subscription; it returns once the hub has released it.
func (s *EventSub) Close() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.end(s, nil)
}
