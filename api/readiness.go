package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/internal/ttlcache"
	"github.com/balletplanner/ballet/store"
)

// Schema checks are cached: a probe every few seconds from each of several
// listeners costs one query a second at most while the schema is not
// current, and one every schemaOKFor once it is.
const (
	schemaRecheck = time.Second
	schemaOKFor   = 15 * time.Second
)

// readyTimeout bounds the checks of one probe.
const readyTimeout = 2 * time.Second

// Readiness is what /readyz answers in every process (the api, a worker's
// and the gateway's listeners, the metrics listener): Postgres answers,
// Redis answers, and the database's schema is at least the version this
// binary needs. A database ahead of the binary is ready: while a newer
// release rolls out, its migration runs before the older pods are gone, and
// migrations keep working for the previous release.
type Readiness struct {
	db  *store.DB
	rdb redis.UniversalClient

	mu       sync.Mutex
	required []namedCheck
	schema   *ttlcache.Cache[store.Schema] // the last reading, under ""
}

// namedCheck is a check Require added.
type namedCheck struct {
	name  string
	check func() error
}

// Require adds a check the process needs to be ready, under name: the
// api's public listener, say (Server.Serving).
func (r *Readiness) Require(name string, check func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.required = append(r.required, namedCheck{name, check})
}

// NewReadiness checks db and rdb.
func NewReadiness(db *store.DB, rdb redis.UniversalClient) *Readiness {
	return &Readiness{db: db, rdb: rdb, schema: ttlcache.New[store.Schema](1, nil)}
}

// ReadyReport is the /readyz body:
//
//	{"status":"ok","checks":{"postgres":"ok","redis":"ok","schema":"ok"},"schema":{"current":95,"expected":95}}
//
// A failed check's value is its error text, and status is "unavailable".
type ReadyReport struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
	// Schema is nil when Postgres could not be asked.
	Schema *SchemaVersions `json:"schema,omitempty"`
}

// SchemaVersions are the database's schema version and this binary's.
type SchemaVersions struct {
	Current  int64 `json:"current"`
	Expected int64 `json:"expected"`
}

// Ready reports whether every check passed.
func (r ReadyReport) Ready() bool { return r.Status == "ok" }

// Check runs the checks.
func (r *Readiness) Check(ctx context.Context) ReadyReport {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	rep := ReadyReport{Status: "ok", Checks: map[string]string{}}
	fail := func(check, msg string) {
		rep.Status = "unavailable"
		rep.Checks[check] = msg
	}
	if err := r.db.Ping(ctx); err != nil {
		fail("postgres", err.Error())
		fail("schema", "not checked: postgres does not answer")
	} else {
		rep.Checks["postgres"] = "ok"
		s, err := r.schemaStatus(ctx)
		switch {
		case err != nil:
			fail("schema", err.Error())
		case s.Behind():
			rep.Schema = &SchemaVersions{Current: s.Current, Expected: s.Expected}
			fail("schema", store.AsError(s.Err()).Message)
		default:
			rep.Schema = &SchemaVersions{Current: s.Current, Expected: s.Expected}
			rep.Checks["schema"] = "ok"
		}
	}
	if err := r.rdb.Ping(ctx).Err(); err != nil {
		fail("redis", err.Error())
	} else {
		rep.Checks["redis"] = "ok"
	}
	r.mu.Lock()
	required := r.required
	r.mu.Unlock()
	for _, c := range required {
		if err := c.check(); err != nil {
			fail(c.name, err.Error())
		} else {
			rep.Checks[c.name] = "ok"
		}
	}
	return rep
}

// schemaStatus reads the schema, or returns the last reading while it is
// fresh: schemaRecheck while migrations are pending, schemaOKFor after.
// Concurrent probes share one reading; a failed one is not kept.
func (r *Readiness) schemaStatus(ctx context.Context) (store.Schema, error) {
	return r.schema.Load(ctx, "", func(ctx context.Context) (store.Schema, time.Time, error) {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		s, err := r.db.SchemaStatus(ctx)
		fresh := schemaOKFor
		if s.Behind() {
			fresh = schemaRecheck
		}
		return s, time.Now().Add(fresh), err
	})
}

// ServeHTTP answers /readyz: 200 with the report when ready, else 503.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rep := r.Check(req.Context())
	w.Header().Set("Content-Type", "application/json")
	if !rep.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rep)
}
