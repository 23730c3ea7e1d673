package benchfair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/balletplanner/ballet/store"
)

// drainTimeout bounds how long a burst may take to drain.
const drainTimeout = 30 * time.Minute

// sessions creates perProject sessions in each of t's projects, 20 at a
// time.
func (r *rig) sessions(ctx context.Context, t tenant, perProject int) ([]string, []string, error) {
	var ids, projects []string
	for _, p := range t.projects {
		for range perProject {
			projects = append(projects, p)
		}
	}
	ids = make([]string, len(projects))
	err := parallel(20, len(projects), func(i int) error {
		s, err := r.db.CreateSession(ctx, t.caller, projects[i], "bench")
		ids[i] = s.ID
		return err
	})
	return ids, projects, err
}

// burst sends one message into each session, 50 sends at a time.
func (r *rig) burst(ctx context.Context, t tenant, sessions []string) error {
	return parallel(50, len(sessions), func(i int) error {
		_, err := r.planner.Submit(ctx, t.caller, store.SendRequest{Session: sessions[i], Text: "go"})
		return err
	})
}

// parallel runs f(0..n-1), at most width at a time, and joins the errors.
func parallel(width, n int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// trickle sends one message every `every` into a new session of t's first
// project until stop is called, which waits for the sends.
func (r *rig) trickle(ctx context.Context, t tenant, every time.Duration) (stop func() error) {
	tctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.send(ctx, t, t.projects[0]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() error {
		cancel()
		wg.Wait()
		return errors.Join(errs...)
	}
}

// resultA is scenario A in one mode.
type resultA struct {
	mode                   string
	aloneN, burstN         int
	aloneP50, aloneP99     time.Duration
	burstP50, burstP99     time.Duration
	burstTurns             int
	burstTook              time.Duration
	turnsPerSec            float64
	quietShare, noisyShare float64
}

// scenarioA: QUIET trickles alone, then NOISY bursts while QUIET goes on.
func scenarioA(ctx context.Context, d Deps, o Options, mode string) (res resultA, err error) {
	res.mode = mode
	r, err := newRig(ctx, d, mode, false, o.Concurrency, d.ModelURL, store.QueueLimits{}, true)
	if err != nil {
		return res, err
	}
	defer func() {
		if _, cerr := r.close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	quiet, err := r.tenant(ctx, "quiet", 1)
	if err != nil {
		return res, err
	}
	noisy, err := r.tenant(ctx, "noisy", o.NoisyProjects)
	if err != nil {
		return res, err
	}
	ids, _, err := r.sessions(ctx, noisy, o.NoisySessions)
	if err != nil {
		return res, err
	}
	smp := r.startSampler(ctx)
	defer smp.stop()
	stopQuiet := r.trickle(ctx, quiet, o.QuietEvery)
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(o.QuietAlone):
	}
	if err := r.burst(ctx, noisy, ids); err != nil {
		_ = stopQuiet()
		return res, fmt.Errorf("NOISY's burst: %w", err)
	}
	err = smp.waitIdle(ctx, drainTimeout, noisy.org.ID)
	if qerr := stopQuiet(); err == nil {
		err = qerr
	}
	if err == nil {
		err = smp.waitIdle(ctx, drainTimeout, quiet.org.ID)
	}
	if err != nil {
		return res, err
	}
	if _, err := smp.stop(); err != nil {
		return res, err
	}
	rows, err := r.turnRows(ctx)
	if err != nil {
		return res, err
	}
	var from, to time.Time
	for _, t := range rows {
		if t.org != noisy.org.ID {
			continue
		}
		if from.IsZero() || t.created.Before(from) {
			from = t.created
		}
		if t.finished.After(to) {
			to = t.finished
		}
	}
	var alone, during []time.Duration
	for _, t := range rows {
		if !t.finished.Before(from) && !t.finished.After(to) {
			res.burstTurns++
		}
		if t.org != quiet.org.ID {
			continue
		}
		switch w := t.started.Sub(t.created); {
		case t.created.Before(from):
			alone = append(alone, w)
		case !t.created.After(to):
			during = append(during, w)
		}
	}
	res.aloneN, res.burstN = len(alone), len(during)
	res.aloneP50, res.aloneP99 = quantile(alone, 50), quantile(alone, 99)
	res.burstP50, res.burstP99 = quantile(during, 50), quantile(during, 99)
	res.burstTook = to.Sub(from)
	res.turnsPerSec = float64(res.burstTurns) / max(res.burstTook.Seconds(), 1e-9)
	shares := slotShares(rows, from, to)
	res.quietShare, res.noisyShare = shares[quiet.org.ID], shares[noisy.org.ID]
	return res, nil
}

// quantile is the nearest-rank p-th percentile of samples.
func quantile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}

// resultB is scenario B, or its run with a cap.
type resultB struct {
	share1, share3 float64 // of the running turns while both are backlogged
	backlogged     int     // samples while both had ready turns
	samples        int
	max3           int // most running turns of the weight-3 organization in a sample
	cap            int
	took           time.Duration
	turns1, turns3 int
}

// scenarioB: two organizations of weights 1 and 3 burst at once; with
// cap > 0, the weight-3 one has max_running_turns = cap.
func scenarioB(ctx context.Context, d Deps, o Options, limit int) (res resultB, err error) {
	res.cap = limit
	r, err := newRig(ctx, d, "fair", false, o.Concurrency, d.ModelURL, store.QueueLimits{}, true)
	if err != nil {
		return res, err
	}
	defer func() {
		if _, cerr := r.close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	one, err := r.tenant(ctx, "light", 1)
	if err != nil {
		return res, err
	}
	three, err := r.tenant(ctx, "heavy", 1)
	if err != nil {
		return res, err
	}
	var cap any
	if limit > 0 {
		cap = limit
	}
	if _, err := r.db.Pool().Exec(ctx, `UPDATE organizations SET scheduling_weight = 3, max_running_turns = $2 WHERE id = $1`,
		three.org.ID, cap); err != nil {
		return res, err
	}
	if _, err := r.db.Pool().Exec(ctx, `SELECT pg_notify('`+store.DispatchChannel+`', '{"k":"w"}')`); err != nil {
		return res, err
	}
	ids1, _, err := r.sessions(ctx, one, o.BurstB)
	if err != nil {
		return res, err
	}
	ids3, _, err := r.sessions(ctx, three, o.BurstB)
	if err != nil {
		return res, err
	}
	smp := r.startSampler(ctx)
	defer smp.stop()
	start := time.Now()
	var wg sync.WaitGroup
	var e1, e3 error
	wg.Add(2)
	go func() { defer wg.Done(); e1 = r.burst(ctx, one, ids1) }()
	go func() { defer wg.Done(); e3 = r.burst(ctx, three, ids3) }()
	wg.Wait()
	if err := errors.Join(e1, e3); err != nil {
		return res, err
	}
	if err := smp.waitIdle(ctx, drainTimeout, one.org.ID, three.org.ID); err != nil {
		return res, err
	}
	res.took = time.Since(start)
	samples, err := smp.stop()
	if err != nil {
		return res, err
	}
	var run1, run3 int
	for _, s := range samples {
		a, b := s[one.org.ID], s[three.org.ID]
		if a.open+b.open == 0 {
			continue // before the burst, or after it
		}
		res.samples++
		res.max3 = max(res.max3, b.running)
		if a.ready > 0 && b.ready > 0 {
			res.backlogged++
			run1 += a.running
			run3 += b.running
		}
	}
	if run1+run3 > 0 {
		res.share1 = float64(run1) / float64(run1+run3)
		res.share3 = float64(run3) / float64(run1+run3)
	}
	res.turns1, res.turns3 = len(ids1), len(ids3)
	return res, nil
}

// resultFlood is the admission scenario.
type resultFlood struct {
	lim                     store.QueueLimits
	floodSent, floodRefused int
	otherSent, otherRefused int
	floodProjectsRefused    int
	firstOtherRefusal       string
}

// scenarioFlood: FLOOD's 11 projects send until each is refused, then
// OTHER sends over the next seconds. No worker runs: admission only.
func scenarioFlood(ctx context.Context, d Deps, o Options) (res resultFlood, err error) {
	res.lim = store.QueueLimits{Total: o.FloodTotal, PerProject: o.FloodProject, PerOrganization: o.FloodOrg}
	if res.lim.PerOrganization == 0 {
		res.lim.PerOrganization = o.FloodTotal / 2
	}
	r, err := newRig(ctx, d, "fair", false, o.Concurrency, d.ModelURL, res.lim, false)
	if err != nil {
		return res, err
	}
	defer func() {
		if _, cerr := r.close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
	}()
	flood, err := r.tenant(ctx, "flood", o.FloodProjects)
	if err != nil {
		return res, err
	}
	other, err := r.tenant(ctx, "other", 1)
	if err != nil {
		return res, err
	}
	var sent, refused, projectsRefused atomic.Int64
	err = parallel(len(flood.projects), len(flood.projects), func(i int) error {
		for n := 0; n < 100000; n++ {
			err := r.send(ctx, flood, flood.projects[i])
			if store.IsCode(err, store.CodeExhausted) {
				refused.Add(1)
				projectsRefused.Add(1)
				return nil
			}
			if err != nil {
				return err
			}
			sent.Add(1)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.floodSent, res.floodRefused, res.floodProjectsRefused = int(sent.Load()), int(refused.Load()), int(projectsRefused.Load())
	gap := o.OtherOver / time.Duration(max(o.OtherSends, 1))
	for range o.OtherSends {
		err := r.send(ctx, other, other.projects[0])
		switch {
		case store.IsCode(err, store.CodeExhausted):
			res.otherRefused++
			if res.firstOtherRefusal == "" {
				res.firstOtherRefusal = err.Error()
			}
		case err != nil:
			return res, err
		default:
			res.otherSent++
		}
		// FLOOD keeps knocking meanwhile.
		if err := r.send(ctx, flood, flood.projects[res.otherSent%len(flood.projects)]); store.IsCode(err, store.CodeExhausted) {
			res.floodRefused++
		} else if err != nil {
			return res, err
		} else {
			res.floodSent++
		}
		time.Sleep(gap)
	}
	return res, nil
}
