package main

import (
	"strings"
	"testing"

	"github.com/balletplanner/ballet/internal/redistest"
	"github.com/balletplanner/ballet/tasks"
)

// TestBurstOnRedisCluster runs the same burst on a three-master Redis
// Cluster: asynq's queue keys, the running-text keys and their publishing
// scripts, the session channels (plain PUBLISH reaches a subscriber on any
// node) and the cancel nudges all work across nodes.
func TestBurstOnRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	rc := tasks.DefaultRedisConfig()
	rc.ClusterAddrs, rc.Namespace = cl.Addrs(), "cl-"
	s, pub, hub := haStack(t, rc, "BALLET_REDIS_CLUSTER_ADDRS="+strings.Join(rc.ClusterAddrs, ","))

	const sessions, perSession = 6, 4
	b := startBurst(t, s, hub, sessions, perSession)
	b.check(t)
	cancelMidStream(t, s, pub)
}
