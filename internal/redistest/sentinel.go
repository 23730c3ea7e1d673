package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/balletplanner/ballet/store/storetest"
)

// MasterName is the name the sentinels monitor the master under.
const MasterName = "mymaster"

// Sentinel is a master, one replica and three sentinels (quorum 2) that
// notice a master down after a second.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
}

// StartSentinel starts the master, the replica and the sentinels, and
// returns once the replica is in sync and every sentinel knows the replica
// and the other sentinels, so that a failover can start at once.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{}
	s.Master = start(t, "master", false)
	s.Replica = start(t, "replica", false, "replicaof 127.0.0.1 "+s.Master.Port())
	for i := range 3 {
		s.Sentinels = append(s.Sentinels, start(t, fmt.Sprintf("sentinel%d", i), true,
			"sentinel monitor "+MasterName+" 127.0.0.1 "+s.Master.Port()+" 2",
			"sentinel down-after-milliseconds "+MasterName+" 1000",
			"sentinel failover-timeout "+MasterName+" 5000",
			"sentinel parallel-syncs "+MasterName+" 1"))
	}
	ctx := context.Background()
	replica := s.Replica.Client(t)
	storetest.WaitForWithin(t, startTimeout, "the replica in sync with the master", func() bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		storetest.WaitForWithin(t, startTimeout, "sentinel "+sn.Addr+" to know the replica and the other sentinels", func() bool {
			replicas, err := c.Replicas(ctx, MasterName).Result()
			if err != nil || len(replicas) != 1 || strings.Contains(fmt.Sprint(replicas[0]["flags"]), "down") {
				return false
			}
			others, err := c.Sentinels(ctx, MasterName).Result()
			return err == nil && len(others) == 2
		})
		_ = c.Close()
	}
	return s
}

// failoverTimeout bounds a failover. A sentinel that aborts a failover
// (one step slower than failover-timeout, 5 s, on a loaded machine) tries
// again only after twice that, so a few retries must fit.
const failoverTimeout = 90 * time.Second

// Addrs are the sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	var addrs []string
	for _, sn := range s.Sentinels {
		addrs = append(addrs, sn.Addr)
	}
	return addrs
}

// Failover asks a sentinel to fail over (SENTINEL FAILOVER), kills the old
// master with SIGKILL as soon as the sentinel took the order, and returns
// once every sentinel names the replica as the master. Writes the old
// master acknowledged after the replica's promotion are lost, as in a real
// crash during a failover.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr})
	defer c.Close()
	if err := c.Failover(ctx, MasterName).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	s.Master.Kill()
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
		storetest.WaitForWithin(t, failoverTimeout, "sentinel "+sn.Addr+" to name the replica as master", func() bool {
			addr, err := c.GetMasterAddrByName(ctx, MasterName).Result()
			return err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == s.Replica.Addr
		})
		_ = c.Close()
	}
	master := s.Replica.Client(t)
	storetest.WaitForWithin(t, failoverTimeout, "the replica to take writes", func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return master.Set(cctx, "redistest:failover", "1", time.Minute).Err() == nil
	})
	s.Master, s.Replica = s.Replica, nil
}
