// Package ttlcache is a small map of values that expire, bounded in size,
// whose concurrent misses of one key share one load.
package ttlcache

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Cache keeps values of V by string key, each until its own expiry. It
// holds at most Max entries: a Set that finds it full drops the expired
// entries and, when that is not enough, starts over empty rather than
// grow. Failed loads are never kept. The zero value is unusable: use New.
type Cache[V any] struct {
	max int
	now func() time.Time

	flight  singleflight.Group
	mu      sync.Mutex
	entries map[string]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New is an empty cache of at most size entries (at least 1), reading the
// time from now (time.Now when nil).
func New[V any](size int, now func() time.Time) *Cache[V] {
	if now == nil {
		now = time.Now
	}
	return &Cache[V]{max: max(size, 1), now: now, entries: map[string]entry[V]{}}
}

// Get is the value under key while it has not expired.
func (c *Cache[V]) Get(key string) (V, bool) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Set keeps v under key until expires; an expiry not after now keeps
// nothing.
func (c *Cache[V]) Set(key string, v V, expires time.Time) {
	now := c.now()
	if !now.Before(expires) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries)
		}
	}
	c.entries[key] = entry[V]{v: v, expires: expires}
}

// Delete drops key.
func (c *Cache[V]) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// Load is the value under key, from the cache while it has not expired,
// else from load, whose value is kept until the expiry it returns. The
// lookups of one key that miss while a load runs share it; load runs with
// ctx's values but not its cancellation, so one caller leaving does not cut
// it short, and each caller waits only as long as its own ctx lasts.
func (c *Cache[V]) Load(ctx context.Context, key string, load func(context.Context) (V, time.Time, error)) (V, error) {
	if v, ok := c.Get(key); ok {
		return v, nil
	}
	lctx := context.WithoutCancel(ctx)
	ch := c.flight.DoChan(key, func() (any, error) {
		if v, ok := c.Get(key); ok { // kept by a load that ended just now
			return v, nil
		}
		v, expires, err := load(lctx)
		if err != nil {
			return v, err
		}
		c.Set(key, v, expires)
		return v, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			var zero V
			return zero, r.Err
		}
		return r.Val.(V), nil
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// Len is how many entries the cache holds, the expired ones not yet
// dropped included.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
