package benchfair

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store"
)

// scenarioCost runs sessions × messages turns, each session sending its
// next message when its previous turn is done, against the fake model at
// no latency, metered, in mode.
func scenarioCost(ctx context.Context, d Deps, o Options, mode string) (cost Cost, err error) {
	r, err := newRig(ctx, d, mode, true, o.CostConcurency, d.FastModelURL, store.QueueLimits{}, true)
	if err != nil {
		return cost, err
	}
	closed := false
	defer func() {
		if !closed {
			_, _ = r.close(context.WithoutCancel(ctx))
		}
	}()
	t, err := r.tenant(ctx, "cost", 1)
	if err != nil {
		return cost, err
	}
	ids, _, err := r.sessions(ctx, t, o.CostSessions)
	if err != nil {
		return cost, err
	}
	var mu sync.Mutex
	waiting := map[string]chan struct{}{}
	doneOf := func(turn string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch := waiting[turn]
		if ch == nil {
			ch = make(chan struct{})
			waiting[turn] = ch
		}
		return ch
	}
	sub := r.env.Redis.PSubscribe(ctx, r.names.SessionChannel("*"))
	if _, err := sub.Receive(ctx); err != nil {
		return cost, err
	}
	defer sub.Close()
	total := o.CostSessions * o.CostMessages
	finished := map[string]bool{}
	go func() {
		for msg := range sub.Channel(redis.WithChannelSize(total * 4)) {
			var out store.Output
			if json.Unmarshal([]byte(msg.Payload), &out) == nil && out.Type == store.OutputDone {
				ch := doneOf(out.Turn)
				mu.Lock()
				if !finished[out.Turn] {
					finished[out.Turn] = true
					close(ch)
				}
				mu.Unlock()
			}
		}
	}()
	if err := r.env.Begin(ctx); err != nil {
		return cost, err
	}
	err = parallel(len(ids), len(ids), func(i int) error {
		for range o.CostMessages {
			res, err := r.planner.Submit(ctx, t.caller, store.SendRequest{Session: ids[i], Text: "go"})
			if err != nil {
				return err
			}
			select {
			case <-doneOf(res.Turn):
			case <-time.After(5 * time.Minute):
				return fmt.Errorf("turn %s not done after 5 minutes", res.Turn)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil {
		return cost, err
	}
	if err := r.env.Stop(ctx, total); err != nil {
		return cost, err
	}
	closed = true
	return r.close(context.WithoutCancel(ctx))
}
