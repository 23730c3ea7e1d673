package dispatch

import (
	"time"

	"github.com/balletplanner/ballet/store"
)

// Priorities, as indexes of a node's ready counts and a human's queues.
const (
	interactive = 0
	batch       = 1
)

// Slot-time estimates: a dispatch charges its keys the slot time a turn
// is expected to hold (the running mean of the turns that ended), and the
// turn's end settles the difference with what it really held.
const (
	firstEstimate = time.Second
	leastEstimate = time.Millisecond
	// estimateGain is the weight of the latest turn in the running mean.
	estimateGain = 0.05
)

// item is one turn the tree schedules: ready in its human's queue, or in
// flight (dispatched, not ended) holding a slot of its keys.
type item struct {
	turn     store.DispatchTurn
	human    *node
	prio     int
	inflight bool
	gone     bool
	// started is when it went in flight and charged the slot seconds it
	// was charged then.
	started time.Time
	charged float64
	// dispatchedAt is when this leader last enqueued its task, and
	// confirmed whether Postgres showed it claimed (or dispatched by
	// direct dispatch) since.
	dispatchedAt time.Time
	confirmed    bool
}

// node is one key of the hierarchy: an organization (a child of the root),
// a project (of an organization) or a human (of a project). Siblings share
// their parent's slots by weight: each node's virtual time grows by the
// slot time its turns hold, divided by its weight (charged at dispatch as
// expected, settled at the end as held), and a free slot goes to the
// eligible sibling with the least.
type node struct {
	id       string
	key      string // an organization's key, for metrics
	parent   *node
	children map[string]*node
	weight   float64
	cap      int // running turns at most; 0 is none
	running  int
	ready    [2]int // ready turns in the subtree, by priority
	vt       float64
	served   uint64 // the pick that last chose it
	// A human's ready turns, oldest first, by priority.
	queue [2][]*item
}

func newNode(id string, parent *node) *node {
	return &node{id: id, parent: parent, children: map[string]*node{}, weight: 1}
}

// active reports whether the node has turns running or ready.
func (n *node) active() bool { return n.running > 0 || n.ready[interactive]+n.ready[batch] > 0 }

// eligible reports whether a turn of priority p can start in the subtree:
// one is ready there and no cap on the way down is full.
func (n *node) eligible(p int) bool {
	if n.ready[p] == 0 || (n.cap > 0 && n.running >= n.cap) {
		return false
	}
	if len(n.children) == 0 {
		return true
	}
	for _, c := range n.children {
		if c.eligible(p) {
			return true
		}
	}
	return false
}

// Caps are the default running-turn caps of the [scheduler] section; 0 is
// no cap.
type Caps struct {
	Organization, Project, Human int
}

// tree is the scheduler's state: every ready and in-flight turn under its
// organization, project and human. It is not safe for concurrent use: the
// leading dispatcher's loop alone uses it.
type tree struct {
	root     *node
	items    map[string]*item
	inflight int
	// estimate is the slot seconds a turn is expected to hold.
	estimate float64
	caps     Caps
	settings map[string]store.ScopeSettings
	picks    uint64
}

func newTree(caps Caps) *tree {
	return &tree{root: newNode("", nil), items: map[string]*item{}, caps: caps, settings: map[string]store.ScopeSettings{},
		estimate: firstEstimate.Seconds()}
}

// path returns the turn's human node, making the missing nodes of its
// organization, project and human. A node made or woken from idle starts at the least
// virtual time of its active siblings: an idle key banks no credit.
func (t *tree) path(d store.DispatchTurn) (human *node) {
	org := t.child(t.root, d.Organization)
	proj := t.child(org, d.Project)
	human = t.child(proj, d.Human)
	human.children = nil
	return human
}

func (t *tree) child(parent *node, id string) *node {
	n := parent.children[id]
	if n == nil {
		n = newNode(id, parent)
		parent.children[id] = n
		t.configure(n)
	}
	if !n.active() {
		first := true
		var least float64
		for _, s := range parent.children {
			if s == n || !s.active() {
				continue
			}
			if first || s.vt < least {
				least, first = s.vt, false
			}
		}
		if !first && least > n.vt {
			n.vt = least
		}
	}
	return n
}

// level says what a node is: 1 organization, 2 project, 3 human.
func level(n *node) int {
	l := 0
	for p := n; p.parent != nil; p = p.parent {
		l++
	}
	return l
}

// configure sets a node's weight, cap and key from the stored settings
// and the defaults.
func (t *tree) configure(n *node) {
	switch level(n) {
	case 1:
		s := t.settings[n.id]
		n.key, n.weight = s.Key, weightOf(s.Weight)
		n.cap = capOf(s.MaxRunningTurns, t.caps.Organization)
	case 2:
		s := t.settings[n.id]
		n.weight = weightOf(s.Weight)
		n.cap = capOf(s.MaxRunningTurns, t.caps.Project)
	case 3:
		proj, org := t.settings[n.parent.id], t.settings[n.parent.parent.id]
		n.cap = capOf(proj.MaxRunningTurnsPerHuman, capOf(org.MaxRunningTurnsPerHuman, t.caps.Human))
	}
}

func weightOf(w int) float64 {
	if w < 1 {
		return 1
	}
	return float64(w)
}

func capOf(stored *int, def int) int {
	if stored != nil {
		return *stored
	}
	return def
}

// setSettings replaces the weights and caps and applies them to every node.
func (t *tree) setSettings(s map[string]store.ScopeSettings) {
	t.settings = s
	t.walk(t.configure)
}

// addSettings adds the settings of keys seen for the first time.
func (t *tree) addSettings(s map[string]store.ScopeSettings) {
	for id, v := range s {
		t.settings[id] = v
	}
	t.walk(func(n *node) {
		if _, ok := s[n.id]; ok || (level(n) == 3 && (hasKey(s, n.parent.id) || hasKey(s, n.parent.parent.id))) {
			t.configure(n)
		}
	})
}

func hasKey(s map[string]store.ScopeSettings, id string) bool {
	_, ok := s[id]
	return ok
}

// walk calls fn for every node but the root.
func (t *tree) walk(fn func(*node)) {
	var rec func(*node)
	rec = func(n *node) {
		for _, c := range n.children {
			fn(c)
			rec(c)
		}
	}
	rec(t.root)
}

// add puts a turn in the tree: ready, or in flight when it is dispatched
// already. A turn known already only moves from ready to in flight.
func (t *tree) add(d store.DispatchTurn, now time.Time) {
	if it := t.items[d.ID]; it != nil {
		if d.Dispatched && !it.inflight {
			t.unready(it)
			t.start(it, now, false)
		}
		it.confirmed = it.confirmed || d.Dispatched
		return
	}
	human := t.path(d)
	it := &item{turn: d, human: human, confirmed: d.Dispatched}
	if d.Batch {
		it.prio = batch
	}
	t.items[d.ID] = it
	if d.Dispatched {
		t.start(it, now, false)
		return
	}
	human.queue[it.prio] = append(human.queue[it.prio], it)
	for n := human; n != nil; n = n.parent {
		n.ready[it.prio]++
	}
}

// remove takes a turn out: it ended, was cancelled, or went with its
// session. Unknown turns are ignored.
func (t *tree) remove(id string, now time.Time) {
	it := t.items[id]
	if it == nil {
		return
	}
	delete(t.items, id)
	if it.inflight {
		held := now.Sub(it.started).Seconds()
		for n := it.human; n != nil; n = n.parent {
			n.running--
			n.vt += (held - it.charged) / n.weight
		}
		t.inflight--
		if it.charged > 0 {
			t.estimate = max(leastEstimate.Seconds(), (1-estimateGain)*t.estimate+estimateGain*held)
		}
		return
	}
	t.unready(it)
}

// putBack undoes the start of a turn whose task did not reach the queue:
// it is ready again, first in its human's queue, and its keys get back the
// slot time they were charged.
func (t *tree) putBack(it *item) {
	for n := it.human; n != nil; n = n.parent {
		n.running--
		n.vt -= it.charged / n.weight
		n.ready[it.prio]++
	}
	t.inflight--
	it.inflight, it.charged = false, 0
	it.human.queue[it.prio] = append([]*item{it}, it.human.queue[it.prio]...)
}

// unready takes a ready turn off its counts; its queue entry is skipped
// when reached.
func (t *tree) unready(it *item) {
	it.gone = true
	for n := it.human; n != nil; n = n.parent {
		n.ready[it.prio]--
	}
}

// start moves a turn in flight, charging its keys the slot time a turn
// is expected to hold; charge is false for a turn found in flight already
// (a resync, a notice), whose end then settles only what it held since.
func (t *tree) start(it *item, now time.Time, charge bool) {
	it.inflight, it.started = true, now
	if charge {
		it.charged = t.estimate
	}
	t.picks++
	for n := it.human; n != nil; n = n.parent {
		n.running++
		n.vt += it.charged / n.weight
		n.served = t.picks
	}
	t.inflight++
}

// pick chooses the next turn to start, moves it in flight and returns it;
// nil when no turn can start (none ready, or every ready one over a cap).
// A free slot goes to the organization with the least virtual time among
// those that can start a turn; inside it, to interactive turns first; then
// to the project, then the human, with the least; then to that human's
// oldest ready turn.
func (t *tree) pick(now time.Time) *item { return t.pickFrom(now, nil) }

// pickUnderShare is pick among the organizations that hold fewer slots
// than their share of the pool's slots: the pool's slots times their
// weight over the weights of the organizations with turns ready or
// running.
func (t *tree) pickUnderShare(now time.Time, slots int) *item {
	var weights float64
	for _, org := range t.root.children {
		if org.active() {
			weights += org.weight
		}
	}
	return t.pickFrom(now, func(org *node) bool {
		return float64(org.running) < float64(slots)*org.weight/weights
	})
}

// backlog is the number of ready turns.
func (t *tree) backlog() int { return t.root.ready[interactive] + t.root.ready[batch] }

// pickFrom is pick among the organizations that allow accepts (all when
// nil).
func (t *tree) pickFrom(now time.Time, allow func(*node) bool) *item {
	org := choose(t.root, func(n *node) bool {
		return (allow == nil || allow(n)) && (n.eligible(interactive) || n.eligible(batch))
	})
	if org == nil {
		return nil
	}
	p := interactive
	if !org.eligible(interactive) {
		p = batch
	}
	ok := func(n *node) bool { return n.eligible(p) }
	proj := choose(org, ok)
	human := choose(proj, ok)
	q := human.queue[p]
	for len(q) > 0 && (q[0].gone || q[0].inflight) {
		q = q[1:]
	}
	it := q[0]
	human.queue[p] = q[1:]
	for n := human; n != nil; n = n.parent {
		n.ready[p]--
	}
	t.start(it, now, true)
	return it
}

// choose returns the child of parent that ok accepts with the least
// virtual time; ties go to the fewest running turns per weight, then to the
// one served longest ago.
func choose(parent *node, ok func(*node) bool) *node {
	var best *node
	for _, c := range parent.children {
		if !ok(c) {
			continue
		}
		if best == nil || better(c, best) {
			best = c
		}
	}
	return best
}

func better(a, b *node) bool {
	if a.vt != b.vt {
		return a.vt < b.vt
	}
	ra, rb := float64(a.running)/a.weight, float64(b.running)/b.weight
	if ra != rb {
		return ra < rb
	}
	if a.served != b.served {
		return a.served < b.served
	}
	return a.id < b.id
}

// reset rebuilds the tree from a snapshot of the backlog and what is in
// flight. Keys keep their virtual time; keys with nothing left go.
func (t *tree) reset(turns []store.DispatchTurn, now time.Time) {
	t.walk(func(n *node) {
		n.running, n.ready, n.queue = 0, [2]int{}, [2][]*item{}
	})
	t.items, t.inflight = map[string]*item{}, 0
	for _, d := range turns {
		t.add(d, now)
	}
	t.prune(t.root)
}

// prune drops idle nodes.
func (t *tree) prune(n *node) {
	for id, c := range n.children {
		if !c.active() {
			delete(n.children, id)
			continue
		}
		t.prune(c)
	}
}
