package benchfair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// orgCounts are one organization's open turns at a sample.
type orgCounts struct{ running, ready, open int }

// sample is the open turns of each organization (by id) at one time.
type sample map[string]orgCounts

// sampler reads the running, ready and open turns of each organization
// from Postgres every 100 ms until stopped.
type sampler struct {
	mu      sync.Mutex
	samples []sample
	last    sample
	err     error
	cancel  context.CancelFunc
	done    chan struct{}
}

const sampleQuery = `SELECT p.organization_id::text,
	count(*) FILTER (WHERE t.status = 'running'),
	count(*) FILTER (WHERE t.ready_at IS NOT NULL AND t.enqueued_at IS NULL),
	count(*)
FROM planner_turns t JOIN projects p ON p.id = t.project_id
WHERE t.status IN ('queued', 'running') AND t.finished_at IS NULL
GROUP BY 1`

func (r *rig) startSampler(ctx context.Context) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan struct{}), last: sample{}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			smp, err := r.sampleOnce(ctx)
			s.mu.Lock()
			if err != nil && ctx.Err() == nil && s.err == nil {
				s.err = err
			}
			if err == nil {
				s.samples = append(s.samples, smp)
				s.last = smp
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (r *rig) sampleOnce(ctx context.Context) (sample, error) {
	rows, err := r.db.Pool().Query(ctx, sampleQuery)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	smp := sample{}
	for rows.Next() {
		var org string
		var c orgCounts
		if err := rows.Scan(&org, &c.running, &c.ready, &c.open); err != nil {
			return nil, err
		}
		smp[org] = c
	}
	return smp, rows.Err()
}

// stop ends the sampling and returns the samples.
func (s *sampler) stop() ([]sample, error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.err
}

// waitIdle waits until none of orgs has an open turn, as sampled, for at
// most timeout.
func (s *sampler) waitIdle(ctx context.Context, timeout time.Duration, orgs ...string) error {
	deadline := time.Now().Add(timeout)
	// The first sample after this call, not one taken before the sends.
	time.Sleep(250 * time.Millisecond)
	for {
		s.mu.Lock()
		last, err := s.last, s.err
		s.mu.Unlock()
		if err != nil {
			return err
		}
		open := 0
		for _, o := range orgs {
			open += last[o].open
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d turns still open after %s", open, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// turnRow is one turn's organization and times, read at the end.
type turnRow struct {
	org                        string
	created, started, finished time.Time
}

func (r *rig) turnRows(ctx context.Context) ([]turnRow, error) {
	rows, err := r.db.Pool().Query(ctx, `SELECT p.organization_id::text, t.created_at, t.started_at, t.finished_at
		FROM planner_turns t JOIN projects p ON p.id = t.project_id WHERE t.status = 'done'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []turnRow
	for rows.Next() {
		var t turnRow
		var started, finished *time.Time
		if err := rows.Scan(&t.org, &t.created, &started, &finished); err != nil {
			return nil, err
		}
		if started == nil || finished == nil {
			return nil, errors.New("a done turn without its start or end")
		}
		t.started, t.finished = *started, *finished
		out = append(out, t)
	}
	return out, rows.Err()
}

// slotShares integrates each organization's running turns over
// [from, to]: its share of the slot-time used.
func slotShares(rows []turnRow, from, to time.Time) map[string]float64 {
	busy := map[string]float64{}
	var total float64
	for _, t := range rows {
		a, b := maxTime(t.started, from), minTime(t.finished, to)
		if d := b.Sub(a).Seconds(); d > 0 {
			busy[t.org] += d
			total += d
		}
	}
	for k := range busy {
		busy[k] /= max(total, 1e-9)
	}
	return busy
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
