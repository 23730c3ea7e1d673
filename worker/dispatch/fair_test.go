package dispatch

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store"
)

// sim drives a tree as the dispatcher would, on a clock of its own: a pool
// of slots, each dispatched turn ending after its duration, every free slot
// filled at once.
type sim struct {
	t     *testing.T
	tree  *tree
	slots int
	now   time.Time
	ends  map[string]time.Time
	// slotTime is the slot time each organization, project and human used.
	slotTime map[string]time.Duration
	last     time.Time
	n        int
	// maxRunning is the most turns each key ran at once.
	maxRunning map[string]int
}

func newSim(t *testing.T, slots int, caps Caps, settings map[string]store.ScopeSettings) *sim {
	tr := newTree(caps)
	if settings != nil {
		tr.setSettings(settings)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &sim{t: t, tree: tr, slots: slots, now: start, last: start, ends: map[string]time.Time{},
		slotTime: map[string]time.Duration{}, maxRunning: map[string]int{}}
}

// send adds n ready turns of a human in a project of an organization.
func (s *sim) send(org, project, human string, n int, batchPrio bool) []string {
	var ids []string
	for range n {
		s.n++
		id := fmt.Sprintf("%s/%s/%s/%d", org, project, human, s.n)
		s.tree.add(store.DispatchTurn{ID: id, Session: id, Organization: org, Project: project, Human: human,
			Batch: batchPrio, ReadyAt: s.now}, s.now)
		ids = append(ids, id)
	}
	return ids
}

// fill dispatches while slots are free; each turn runs for dur(turn).
func (s *sim) fill(dur func(store.DispatchTurn) time.Duration) []store.DispatchTurn {
	var started []store.DispatchTurn
	for s.tree.inflight < s.slots {
		it := s.tree.pick(s.now)
		if it == nil {
			break
		}
		s.ends[it.turn.ID] = s.now.Add(dur(it.turn))
		started = append(started, it.turn)
	}
	s.observe()
	return started
}

// observe records how many turns each key runs now.
func (s *sim) observe() {
	for _, org := range s.tree.root.children {
		s.maxRunning[org.id] = max(s.maxRunning[org.id], org.running)
		for _, p := range org.children {
			s.maxRunning[p.id] = max(s.maxRunning[p.id], p.running)
			for _, h := range p.children {
				k := p.id + "/" + h.id
				s.maxRunning[k] = max(s.maxRunning[k], h.running)
			}
		}
	}
}

// advance moves the clock to the next end, ends every turn due and fills
// the slots again; false when nothing runs.
func (s *sim) advance(dur func(store.DispatchTurn) time.Duration) bool {
	var next time.Time
	for _, e := range s.ends {
		if next.IsZero() || e.Before(next) {
			next = e
		}
	}
	if next.IsZero() {
		return false
	}
	s.account(next)
	s.now = next
	for id, e := range s.ends {
		if !e.After(next) {
			delete(s.ends, id)
			s.tree.remove(id, s.now)
		}
	}
	s.fill(dur)
	return true
}

// account adds the slot time used up to until.
func (s *sim) account(until time.Time) {
	d := until.Sub(s.last)
	for _, org := range s.tree.root.children {
		s.slotTime[org.id] += time.Duration(org.running) * d
		for _, p := range org.children {
			s.slotTime[p.id] += time.Duration(p.running) * d
		}
	}
	s.last = until
}

// backlogged reports whether every organization or project named has
// ready turns.
func (s *sim) backlogged(keys ...string) bool {
	for _, k := range keys {
		found := false
		for _, org := range s.tree.root.children {
			if org.id == k && org.ready[interactive]+org.ready[batch] > 0 {
				found = true
			}
			if p := org.children[k]; p != nil && p.ready[interactive]+p.ready[batch] > 0 {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func share(s *sim, keys ...string) []float64 {
	var total time.Duration
	for _, k := range keys {
		total += s.slotTime[k]
	}
	out := make([]float64, len(keys))
	for i, k := range keys {
		out[i] = float64(s.slotTime[k]) / float64(total)
	}
	return out
}

func fixed(d time.Duration) func(store.DispatchTurn) time.Duration {
	return func(store.DispatchTurn) time.Duration { return d }
}

func weight(w int) store.ScopeSettings {
	return store.ScopeSettings{SchedulingSettings: store.SchedulingSettings{Weight: w}}
}

func intp(n int) *int { return &n }

// TestSharesFollowWeights: organizations backlogged at once share the slots
// by weight, at every level of the hierarchy, whatever their turns last.
func TestSharesFollowWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		settings map[string]store.ScopeSettings
		send     func(s *sim)
		dur      func(store.DispatchTurn) time.Duration
		keys     []string
		want     []float64
	}{
		{"two organizations, equal", nil, func(s *sim) {
			s.send("A", "A1", "ann", 2000, false)
			s.send("B", "B1", "bob", 2000, false)
		}, fixed(2 * time.Second), []string{"A", "B"}, []float64{0.5, 0.5}},
		{"weights 1:3", map[string]store.ScopeSettings{"A": weight(1), "B": weight(3)}, func(s *sim) {
			s.send("A", "A1", "ann", 2000, false)
			s.send("B", "B1", "bob", 2000, false)
		}, fixed(2 * time.Second), []string{"A", "B"}, []float64{0.25, 0.75}},
		{"an organization with many projects gets no more", nil, func(s *sim) {
			for i := range 11 {
				s.send("A", fmt.Sprintf("A%d", i), "ann", 300, false)
			}
			s.send("B", "B1", "bob", 2000, false)
		}, fixed(2 * time.Second), []string{"A", "B"}, []float64{0.5, 0.5}},
		{"projects inside an organization, by weight", map[string]store.ScopeSettings{"P1": weight(1), "P2": weight(3)}, func(s *sim) {
			s.send("A", "P1", "ann", 2000, false)
			s.send("A", "P2", "bob", 2000, false)
		}, fixed(time.Second), []string{"P1", "P2"}, []float64{0.25, 0.75}},
		{"slot time, not turn count: long turns get no more", nil, func(s *sim) {
			s.send("A", "A1", "ann", 2000, false)
			s.send("B", "B1", "bob", 2000, false)
		}, func(d store.DispatchTurn) time.Duration {
			if d.Organization == "A" {
				return 10 * time.Second
			}
			return time.Second
		}, []string{"A", "B"}, []float64{0.5, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, 10, Caps{}, tt.settings)
			tt.send(s)
			s.fill(tt.dur)
			// Measured while every key has turns waiting.
			for s.backlogged(tt.keys...) && s.advance(tt.dur) {
			}
			got := share(s, tt.keys...)
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 0.05 {
					t.Fatalf("shares of %v: %.3f, want %.2f ± 0.05", tt.keys, got, tt.want)
				}
			}
		})
	}
}

// TestHumansShareAProject: one human's flood does not stall a colleague in
// the same project.
func TestHumansShareAProject(t *testing.T) {
	t.Parallel()
	s := newSim(t, 4, Caps{}, nil)
	s.send("A", "P", "flood", 500, false)
	s.fill(fixed(time.Second))
	s.advance(fixed(time.Second))
	late := s.send("A", "P", "colleague", 1, false)[0]
	s.advance(fixed(time.Second))
	if _, ok := s.ends[late]; !ok {
		t.Fatalf("the colleague's turn did not start at the next free slot")
	}
}

// TestLoneTenantGetsThePool: work-conserving: with nobody else, one
// organization's burst takes every slot.
func TestLoneTenantGetsThePool(t *testing.T) {
	t.Parallel()
	s := newSim(t, 10, Caps{}, map[string]store.ScopeSettings{"A": weight(1), "B": weight(1000)})
	s.send("A", "A1", "ann", 50, true)
	if got := len(s.fill(fixed(time.Second))); got != 10 {
		t.Fatalf("%d turns started, want 10", got)
	}
}

// TestCapsHoldTurnsBack: no key runs more than its cap; a turn over a cap
// waits without a slot, and the slot goes to another key.
func TestCapsHoldTurnsBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		caps     Caps
		settings map[string]store.ScopeSettings
		key      string
		want     int
	}{
		{"organization default", Caps{Organization: 3}, nil, "A", 3},
		{"project default", Caps{Project: 3}, nil, "A1", 3},
		{"human default", Caps{Human: 3}, nil, "A1/ann", 3},
		{"organization override", Caps{Organization: 8}, map[string]store.ScopeSettings{
			"A": {SchedulingSettings: store.SchedulingSettings{Weight: 1, MaxRunningTurns: intp(2)}}}, "A", 2},
		{"override 0 is no cap", Caps{Organization: 3}, map[string]store.ScopeSettings{
			"A": {SchedulingSettings: store.SchedulingSettings{Weight: 1, MaxRunningTurns: intp(0)}}}, "A", 10},
		{"human cap from the project", Caps{Human: 5}, map[string]store.ScopeSettings{
			"A1": {SchedulingSettings: store.SchedulingSettings{Weight: 1, MaxRunningTurnsPerHuman: intp(1)}}}, "A1/ann", 1},
		{"human cap from the organization", Caps{}, map[string]store.ScopeSettings{
			"A": {SchedulingSettings: store.SchedulingSettings{Weight: 1, MaxRunningTurnsPerHuman: intp(2)}}}, "A1/ann", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, 10, tt.caps, tt.settings)
			s.send("A", "A1", "ann", 200, false)
			s.fill(fixed(time.Second))
			for i := 0; i < 50 && s.advance(fixed(time.Second)); i++ {
			}
			if got := s.maxRunning[tt.key]; got != tt.want {
				t.Fatalf("%s ran up to %d at once, want %d", tt.key, got, tt.want)
			}
			// The slots the cap leaves go to an organization without caps.
			settings := map[string]store.ScopeSettings{
				"B":  {SchedulingSettings: store.SchedulingSettings{Weight: 1, MaxRunningTurns: intp(0), MaxRunningTurnsPerHuman: intp(0)}},
				"B1": {SchedulingSettings: store.SchedulingSettings{Weight: 1, MaxRunningTurns: intp(0)}},
			}
			for k, v := range tt.settings {
				settings[k] = v
			}
			s2 := newSim(t, 10, tt.caps, settings)
			s2.send("A", "A1", "ann", 200, false)
			s2.send("B", "B1", "bob", 200, false)
			if got := len(s2.fill(fixed(time.Second))); got != 10 {
				t.Fatalf("%d of 10 slots used with a second organization waiting", got)
			}
		})
	}
}

// TestInteractiveFirstInsideTheShare: inside an organization interactive
// turns start before batch ones, but its batch turns never take another
// organization's share.
func TestInteractiveFirstInsideTheShare(t *testing.T) {
	t.Parallel()
	s := newSim(t, 4, Caps{}, nil)
	s.send("A", "A1", "script", 100, true)
	s.send("B", "B1", "bob", 100, false)
	s.fill(fixed(time.Second))
	s.send("A", "A2", "ann", 3, false)
	for range 20 {
		s.advance(fixed(time.Second))
	}
	got := share(s, "A", "B")
	if math.Abs(got[0]-0.5) > 0.05 {
		t.Fatalf("shares A, B = %.3f with A's batch turns, want 0.5 each", got)
	}
	// A's interactive turns started at A's first free slots, ahead of
	// A's batch turns queued before them.
	s2 := newSim(t, 2, Caps{}, nil)
	s2.send("A", "A1", "script", 10, true)
	s2.fill(fixed(time.Second))
	inter := s2.send("A", "A1", "ann", 2, false)
	s2.advance(fixed(time.Second))
	for _, id := range inter {
		if _, ok := s2.ends[id]; !ok {
			t.Fatalf("interactive turn %s waits behind batch turns", id)
		}
	}
}

// TestIdleOrganizationBanksNoCredit: an organization back from idle gets
// its share from then on, not the slots it left unused.
func TestIdleOrganizationBanksNoCredit(t *testing.T) {
	t.Parallel()
	s := newSim(t, 10, Caps{}, nil)
	s.send("B", "B1", "bob", 5000, false)
	s.send("A", "A1", "ann", 1, false)
	s.fill(fixed(time.Second))
	for range 100 {
		s.advance(fixed(time.Second))
	}
	s.slotTime = map[string]time.Duration{}
	s.send("A", "A1", "ann", 5000, false)
	for range 20 {
		s.advance(fixed(time.Second))
	}
	if got := share(s, "A", "B"); got[0] > 0.6 {
		t.Fatalf("A back from idle took %.2f of the slots, want about half", got[0])
	}
}

// TestRemovedTurnsNeverStart: a turn cancelled while ready is never
// picked, and an in-flight turn's end frees its slot.
func TestRemovedTurnsNeverStart(t *testing.T) {
	t.Parallel()
	s := newSim(t, 1, Caps{}, nil)
	ids := s.send("A", "A1", "ann", 3, false)
	s.tree.remove(ids[1], s.now)
	var got []string
	for range 3 {
		if it := s.tree.pick(s.now); it != nil {
			got = append(got, it.turn.ID)
			s.tree.remove(it.turn.ID, s.now)
		}
	}
	if len(got) != 2 || got[0] != ids[0] || got[1] != ids[2] {
		t.Fatalf("picked %v, want %v and %v", got, ids[0], ids[2])
	}
	if s.tree.inflight != 0 || s.tree.root.ready != [2]int{} {
		t.Fatalf("in flight %d, ready %v after every turn ended", s.tree.inflight, s.tree.root.ready)
	}
}

// TestResetKeepsInFlight: a resync rebuilds the same backlog and in-flight
// counts from a snapshot, and a dispatched notice moves a ready turn.
func TestResetKeepsInFlight(t *testing.T) {
	t.Parallel()
	tr := newTree(Caps{})
	now := time.Now()
	tr.reset([]store.DispatchTurn{
		{ID: "1", Organization: "A", Project: "P", Human: "h", Dispatched: true},
		{ID: "2", Organization: "A", Project: "P", Human: "h"},
		{ID: "3", Organization: "B", Project: "Q", Human: "h", Batch: true},
	}, now)
	if tr.inflight != 1 || tr.root.ready != [2]int{1, 1} {
		t.Fatalf("in flight %d, ready %v", tr.inflight, tr.root.ready)
	}
	tr.add(store.DispatchTurn{ID: "2", Organization: "A", Project: "P", Human: "h", Dispatched: true}, now)
	if tr.inflight != 2 || tr.root.ready != [2]int{0, 1} {
		t.Fatalf("after the dispatched notice: in flight %d, ready %v", tr.inflight, tr.root.ready)
	}
	if it := tr.pick(now); it == nil || it.turn.ID != "3" {
		t.Fatalf("picked %+v, want turn 3", it)
	}
}

// TestPickUnderShare: while starts are staggered, only an organization
// holding fewer slots than its weighted share of the pool may start one; a
// lone organization's share is the whole pool.
func TestPickUnderShare(t *testing.T) {
	t.Parallel()
	s := newSim(t, 10, Caps{}, nil)
	s.send("A", "A1", "ann", 6, false)
	s.fill(fixed(time.Second))
	s.send("A", "A1", "ann", 10, false)
	if it := s.tree.pickUnderShare(s.now, 10); it == nil || it.turn.Organization != "A" {
		t.Fatalf("A alone with 7 of 10 slots: picked %+v, want A's", it)
	}
	s.send("B", "B1", "bob", 10, false)
	var got []string
	for {
		it := s.tree.pickUnderShare(s.now, 10)
		if it == nil {
			break
		}
		got = append(got, it.turn.Organization)
	}
	// A holds 7, over its share of 5; B starts until it holds 5.
	if strings.Join(got, "") != "BBBBB" {
		t.Fatalf("picked %v under share, want B five times", got)
	}
}
