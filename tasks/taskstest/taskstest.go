// Package taskstest gives each test its own Redis key space: a client on the
// shared test Redis and a namespace that prefixes its queues and channels.
package taskstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/tasks"
)

// URL is the Redis the tests use; BALLET_TEST_REDIS_URL overrides it.
func URL() string {
	if u := os.Getenv("BALLET_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Config returns a Redis configuration with a namespace of the test's own.
// Every key under the namespace is deleted when the test ends.
func Config(t testing.TB) tasks.RedisConfig {
	t.Helper()
	c := tasks.DefaultRedisConfig()
	c.URL = URL()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	c.Namespace = "t" + hex.EncodeToString(b) + "-"
	t.Cleanup(func() { sweep(c.Namespace) })
	return c
}

// New returns a client and the test's namespace.
func New(t testing.TB) (redis.UniversalClient, tasks.RedisConfig) {
	t.Helper()
	c := Config(t)
	rdb, err := tasks.NewRedisClient(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := tasks.Ping(context.Background(), rdb, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, c
}

// sweep deletes the namespace's keys, including asynq's "asynq:{<queue>}:…".
func sweep(ns string) {
	ctx := context.Background()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		return
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	for _, pattern := range []string{ns + "*", "asynq:{" + ns + "*"} {
		iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}
	// asynq keeps a set of queue names; drop ours from it.
	members, _ := rdb.SMembers(ctx, "asynq:queues").Result()
	for _, m := range members {
		if len(m) >= len(ns) && m[:len(ns)] == ns {
			rdb.SRem(ctx, "asynq:queues", m)
		}
	}
}
