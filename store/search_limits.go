package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A search can be far more expensive than any other read: its cost grows
// with the query and the organization's data. These limits keep one
// tenant's searches from holding the connections that everyone else needs:
// a query is bounded in characters and terms, each search runs under a
// statement timeout, and searches pass a gate that caps how many hold a
// connection at once, in the process and per organization. Plain reads never
// pass the gate, so the rest of the pool is always theirs.

// tsqueryStack is the depth of Postgres's tsquery parser stack: more than
// this many consecutive operators (e.g. 33 dashes) fail the whole statement.
const tsqueryStack = 32

// searchLimits are the effective limits of a DB.
type searchLimits struct {
	timeout  time.Duration // statement timeout; 0 = none
	maxConns int           // searches holding a connection at once
	perOrg   int           // of them for one organization
	wait     time.Duration // longest wait for a slot
	maxTerms int
	maxChars int
	gate     *searchGate
}

// defaultSearch holds the built-in search limits.
var defaultSearch = searchLimits{
	timeout:  3 * time.Second,
	maxConns: 5,
	perOrg:   2,
	wait:     2 * time.Second,
	maxTerms: 16,
	maxChars: 500,
}

// validateSearch reports the first invalid search_* key of [database].
func (c Config) validateSearch() error {
	switch {
	case c.SearchTimeout <= 0:
		return errors.New("database.search_timeout: must be positive")
	case c.SearchMaxConns < 1 || int32(c.SearchMaxConns) >= c.MaxConns:
		return fmt.Errorf("database.search_max_conns: must be at least 1 and less than database.max_conns (%d), got %d",
			c.MaxConns, c.SearchMaxConns)
	case c.SearchMaxConnsPerOrg < 1 || c.SearchMaxConnsPerOrg > c.SearchMaxConns:
		return fmt.Errorf("database.search_max_conns_per_org: must be 1 to database.search_max_conns (%d), got %d",
			c.SearchMaxConns, c.SearchMaxConnsPerOrg)
	case c.SearchQueueTimeout < 0:
		return errors.New("database.search_queue_timeout: must not be negative")
	case c.SearchMaxTerms < 1 || c.SearchMaxTerms > tsqueryStack:
		return fmt.Errorf("database.search_max_terms: must be 1-%d, got %d", tsqueryStack, c.SearchMaxTerms)
	case c.SearchMaxChars < 1 || c.SearchMaxChars > 10000:
		return fmt.Errorf("database.search_max_chars: must be 1-10000, got %d", c.SearchMaxChars)
	}
	return nil
}

// searchLimitsOf takes the limits of cfg; a zero field takes its default,
// and the connection caps leave at least one connection of the pool free.
// Values beyond what Validate accepts are taken as given (benchmarks turn
// the limits off that way).
func searchLimitsOf(cfg Config) searchLimits {
	l := defaultSearch
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set(&l.maxConns, cfg.SearchMaxConns)
	set(&l.perOrg, cfg.SearchMaxConnsPerOrg)
	set(&l.maxTerms, cfg.SearchMaxTerms)
	set(&l.maxChars, cfg.SearchMaxChars)
	if cfg.SearchTimeout != 0 {
		l.timeout = max(cfg.SearchTimeout, 0)
	}
	if cfg.SearchQueueTimeout != 0 {
		l.wait = max(cfg.SearchQueueTimeout, 0)
	}
	if cfg.SearchMaxConns == 0 && cfg.MaxConns > 0 {
		l.maxConns = max(1, min(l.maxConns, int(cfg.MaxConns)-1))
	}
	l.perOrg = min(l.perOrg, l.maxConns)
	l.gate = newSearchGate(l.maxConns, l.perOrg, l.wait)
	return l
}

// checkQuery refuses a query over the character or term limit.
func (l searchLimits) checkQuery(q string) error {
	if n := len([]rune(q)); n > l.maxChars {
		return Errorf(CodeInvalid, "q: at most %d characters, got %d", l.maxChars, n)
	}
	if n := queryTerms(q); n > l.maxTerms {
		return Errorf(CodeInvalid, "q: at most %d terms (words and operators such as -), got %d", l.maxTerms, n)
	}
	return nil
}

// queryTerms counts the words of q (runs of letters and digits) and its
// operator dashes (those not inside a word, as in "e-mail"), which is
// what websearch_to_tsquery turns into operands and NOT operators.
func queryTerms(q string) int {
	rs := []rune(q)
	wordy := func(i int) bool {
		return i >= 0 && i < len(rs) && (unicode.IsLetter(rs[i]) || unicode.IsDigit(rs[i]))
	}
	n := 0
	for i, r := range rs {
		switch {
		case wordy(i) && !wordy(i-1):
			n++
		case r == '-' && !(wordy(i-1) && wordy(i+1)):
			n++
		}
	}
	return n
}

// searchTx runs fn, the statements of one search, in a read-only
// transaction under the statement timeout, once the gate has let the
// search of tenant in. A statement that runs out of time is an
// invalid_argument error telling the caller to narrow the query.
func (db *DB) searchTx(ctx context.Context, tenant string, fn func(pgx.Tx) error) error {
	release, err := db.search.gate.enter(ctx, tenant)
	if err != nil {
		return err
	}
	defer release()
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if db.search.timeout > 0 {
			ms := strconv.FormatInt(max(1, db.search.timeout.Milliseconds()), 10)
			if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, ms); err != nil {
				return err
			}
		}
		return fn(tx)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "57014" && ctx.Err() == nil { // query_canceled by the timeout
		return Errorf(CodeInvalid, "q: the search took longer than %s; narrow the query", db.search.timeout)
	}
	return err
}

// searchTenant names the share of the gate a search takes: the
// organization it searches, else the organizations the caller reads
// ("platform" for a platform-wide reader).
func searchTenant(caller Caller, organizationID string) string {
	if organizationID != "" {
		return organizationID
	}
	p := caller.Principal
	if p == nil {
		return ""
	}
	var orgs []string
	for _, b := range p.Bindings {
		if b.Scope.Kind == ScopePlatform {
			return "platform"
		}
		orgs = append(orgs, b.Scope.OrganizationID)
	}
	slices.Sort(orgs)
	return strings.Join(slices.Compact(orgs), ",")
}

// searchGate lets at most max searches hold a connection at once, at most
// perOrg of them for one tenant; the others wait, in no set order, up to
// wait, and are then refused as resource_exhausted.
type searchGate struct {
	slots  chan struct{}
	perOrg int
	wait   time.Duration

	mu      sync.Mutex
	tenants map[string]*tenantSlots
}

// tenantSlots is one tenant's share; users counts its holders and
// waiters, and the entry is dropped when it falls to 0.
type tenantSlots struct {
	slots chan struct{}
	users int
}

func newSearchGate(max, perOrg int, wait time.Duration) *searchGate {
	return &searchGate{slots: make(chan struct{}, max), perOrg: perOrg, wait: wait, tenants: map[string]*tenantSlots{}}
}

// enter waits for a slot of the tenant, then one of the process, and
// returns the function that gives both back.
func (g *searchGate) enter(ctx context.Context, tenant string) (func(), error) {
	ts := g.join(tenant)
	mine := take(ts.slots)
	if mine && take(g.slots) {
		return g.releaser(tenant, ts), nil
	}
	fail := func(err error) (func(), error) {
		if mine {
			<-ts.slots
		}
		g.leave(tenant, ts)
		return nil, err
	}
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	if !mine {
		select {
		case ts.slots <- struct{}{}:
			mine = true
		case <-timer.C:
			return fail(Errorf(CodeExhausted, "search: this organization already runs %d searches at once; try again shortly", g.perOrg))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	select {
	case g.slots <- struct{}{}:
		return g.releaser(tenant, ts), nil
	case <-timer.C:
		return fail(Errorf(CodeExhausted, "search: %d searches are running; try again shortly", cap(g.slots)))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// take takes a slot of slots if one is free.
func take(slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (g *searchGate) releaser(tenant string, ts *tenantSlots) func() {
	return func() {
		<-g.slots
		<-ts.slots
		g.leave(tenant, ts)
	}
}

func (g *searchGate) join(tenant string) *tenantSlots {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := g.tenants[tenant]
	if ts == nil {
		ts = &tenantSlots{slots: make(chan struct{}, g.perOrg)}
		g.tenants[tenant] = ts
	}
	ts.users++
	return ts
}

func (g *searchGate) leave(tenant string, ts *tenantSlots) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ts.users--; ts.users == 0 {
		delete(g.tenants, tenant)
	}
}
