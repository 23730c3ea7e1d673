package redistest

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestSentinelFailsOverToTheReplica(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	ctx := context.Background()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.Addrs()})
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Wait(ctx, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := s.Master.Addr
	s.Failover(t)
	if s.Master.Addr == old {
		t.Fatalf("master still %s", old)
	}
	got, err := rdb.Get(ctx, "k").Result()
	if err != nil || got != "before" {
		t.Fatalf("after the failover: %q, %v; want the replicated write", got, err)
	}
}

func TestClusterServesEverySlot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer rdb.Close()
	nodes := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
		n, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		nodes[n.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("30 keys on %d nodes, want 3", len(nodes))
	}
}
