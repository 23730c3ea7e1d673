package api

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// useRPCMetrics exports the process's /rpc sockets against their limit, on
// reg (nothing without one): ballet_rpc_connections counts the sockets open
// or being upgraded, the ones server.rpc_max_connections caps, and
// ballet_rpc_connections_limit is that cap, so that
// ballet_rpc_connections / ballet_rpc_connections_limit is how full the
// process is.
func (s *Server) useRPCMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ballet_rpc_connections",
		Help: "Realtime /rpc websockets this api process holds (open or being upgraded)."},
		func() float64 { return float64(s.rpcConns.reserved.Load()) })
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ballet_rpc_connections_limit",
		Help: "The /rpc websockets one api process holds at most (server.rpc_max_connections)."},
		func() float64 { return float64(s.rpcCfg.maxConns) })
	stalls := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ballet_api_accept_stalls_total",
		Help: "Accepts of the public listener that failed for want of file descriptors or buffers and were tried again."},
		func() float64 { return float64(s.acceptStalls.Load()) })
	for _, c := range []prometheus.Collector{open, limit, stalls} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("api: register rpc metrics: %w", err)
		}
	}
	return nil
}
