package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/balletplanner/ballet/store"
)

// modeResult is one mode's turns and their cost.
type modeResult struct {
	times []turnTimes
	took  time.Duration
	cost  turnCost
}

// runTurnMode runs one mode on a database of its own, measuring its cost.
func runTurnMode(ctx context.Context, cfg Config, o turnBenchOptions, mode string, fake *fakeProcess, out io.Writer) (modeResult, error) {
	bd, err := openBenchDatabase(ctx, cfg.Database, o.reuseDB)
	if err != nil {
		return modeResult{}, err
	}
	defer bd.close(ctx, o.keepDB)
	if bd.fresh {
		fmt.Fprintf(out, "%s: database %s\n", mode, bd.name)
	}
	counter := &pgCounter{}
	mc := cfg
	mc.Database.URL, mc.Database.Tracer = bd.url, counter
	mc.Database.Migrate = mc.Database.Migrate && !bd.fresh
	rt, err := setup(ctx, mc, "bench")
	if err != nil {
		return modeResult{}, err
	}
	meter := &costMeter{bd: bd, rdb: rt.rdb, pool: rt.db.Pool(), counter: counter, model: fake}
	begin, end := meter.begin, meter.stop
	var profile *os.File
	if o.cpuProfile != "" {
		begin = func(ctx context.Context) error {
			if err := meter.begin(ctx); err != nil {
				return err
			}
			if profile, err = os.Create(o.cpuProfile + "." + mode); err != nil {
				return fmt.Errorf("bench turns: --cpu-profile: %w", err)
			}
			return pprof.StartCPUProfile(profile)
		}
		end = func(ctx context.Context, turns int) error {
			pprof.StopCPUProfile()
			if err := profile.Close(); err != nil {
				return fmt.Errorf("bench turns: --cpu-profile: %w", err)
			}
			fmt.Fprintf(out, "%s: CPU profile of the turns in %s\n", mode, profile.Name())
			return meter.stop(ctx, turns)
		}
	}
	times, took, err := runTurns(ctx, rt, turnWorkload{fakeURL: fake.url, mode: mode, sessions: o.sessions, messages: o.messages,
		begin: begin, end: end})
	rt.close()
	if err != nil {
		return modeResult{}, err
	}
	cost, err := meter.finish(ctx)
	return modeResult{times, took, cost}, err
}

// benchSessions creates n sessions, 20 at a time.
func benchSessions(ctx context.Context, db *store.DB, caller store.Caller, project string, n int) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 20)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s, err := db.CreateSession(ctx, caller, project, "bench")
			if err == nil {
				ids[i] = s.ID
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench turns: create sessions: %w", err)
	}
	return ids, nil
}

// validate refuses flags that cannot run.
func (o turnBenchOptions) validate() ([]string, error) {
	var modes []string
	for mode := range strings.SplitSeq(o.modes, ",") {
		if mode = strings.TrimSpace(mode); mode != "queue" && mode != "direct" {
			return nil, usageError{fmt.Sprintf("bench turns: --mode: unknown mode %q (queue, direct)", mode)}
		}
		modes = append(modes, mode)
	}
	switch {
	case o.sessions < 1:
		return nil, usageError{"bench turns: --sessions: must be at least 1"}
	case o.messages < 1:
		return nil, usageError{"bench turns: --messages: must be at least 1"}
	case o.rounds < 1:
		return nil, usageError{"bench turns: --rounds: must be at least 1"}
	case o.latency < 0 || o.memLatency < 0:
		return nil, usageError{"bench turns: --latency and --memory-latency: must not be negative"}
	case o.memTurns < 0:
		return nil, usageError{"bench turns: --memory-turns: must not be negative (0 skips the phase)"}
	case o.reuseDB && o.keepDB:
		return nil, usageError{"bench turns: --keep-database and --reuse-database exclude each other (a reused database is never dropped)"}
	}
	return modes, nil
}
