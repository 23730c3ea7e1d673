package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/balletplanner/ballet/store/storetest"
)

// Cluster is three masters sharing the 16384 slots, without replicas.
type Cluster struct {
	Nodes []*Server
}

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// StartCluster starts three cluster-enabled servers, gives each a third of
// the slots, joins them, and returns once every node reports cluster_state:ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	for i := range 3 {
		c.Nodes = append(c.Nodes, start(t, fmt.Sprintf("node%d", i), false,
			"cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000"))
	}
	ctx := context.Background()
	first := c.Nodes[0].Client(t)
	for i, n := range c.Nodes {
		cl := n.Client(t)
		lo, hi := i*slots/3, (i+1)*slots/3-1
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", n.Addr, err)
		}
		if i > 0 {
			if err := first.ClusterMeet(ctx, "127.0.0.1", n.Port()).Err(); err != nil {
				t.Fatalf("redistest: CLUSTER MEET %s: %v", n.Addr, err)
			}
		}
	}
	for _, n := range c.Nodes {
		cl := n.Client(t)
		storetest.WaitForWithin(t, startTimeout, "node "+n.Addr+" to report cluster_state:ok", func() bool {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			info, err := cl.ClusterInfo(cctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		})
	}
	return c
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}
