package main

import (
	"strings"
	"testing"

	"github.com/balletplanner/ballet/internal/redistest"
	"github.com/balletplanner/ballet/tasks"
)

// TestBurstSurvivesASentinelFailover runs turns in several sessions on a
// master watched by three sentinels, fails over to the replica mid-burst
// and SIGKILLs the old master: every accepted message's turn still ends
// exactly once, no tool call runs twice, the watchers resync and receive
// every stored output, and cancels reach the new master's subscribers.
func TestBurstSurvivesASentinelFailover(t *testing.T) {
	t.Parallel()
	sn := redistest.StartSentinel(t)
	rc := tasks.DefaultRedisConfig()
	rc.SentinelAddrs, rc.SentinelMaster, rc.Namespace = sn.Addrs(), redistest.MasterName, "ha-"
	s, pub, hub := haStack(t, rc, "BALLET_REDIS_SENTINEL_ADDRS="+strings.Join(rc.SentinelAddrs, ","),
		"BALLET_REDIS_SENTINEL_MASTER="+rc.SentinelMaster)

	const sessions, perSession = 4, 6
	b := startBurst(t, s, hub, sessions, perSession)
	b.waitSent(t, sessions*2) // mid-burst
	sn.Failover(t)
	b.check(t)
	if hub.Stats().Resyncs == 0 {
		t.Fatalf("hub stats %+v: the watchers were never resynced", hub.Stats())
	}
	cancelMidStream(t, s, pub)
}
