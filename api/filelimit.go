package api

import (
	"fmt"
	"syscall"
)

// fileReserve is what an api process keeps open besides /rpc sockets, over
// its Postgres and Redis pools: REST and SSE clients, the gateway's
// upstream calls, listeners, hub and LISTEN connections.
const fileReserve = 1024

// FileLimit is the process's open-file limit (RLIMIT_NOFILE; Go raises the
// soft limit to the hard one at start), the /rpc sockets it holds at most,
// and the descriptors that needs: the sockets, the pools, and fileReserve.
type FileLimit struct {
	Limit, Needed uint64
	// RPCMaxConnections is server.rpc_max_connections, or when that is 0
	// the default (20,000) lowered to what fits under Limit.
	RPCMaxConnections int
}

// CheckFileLimit sizes the /rpc sockets to the process's open-file limit:
// past it the listener cannot accept, and clients see a port that does not
// answer. A server.rpc_max_connections that does not fit is refused; 0
// takes the default, lowered to what fits. pools is the Postgres and Redis
// connections the process may open.
func CheckFileLimit(cfg Config, pools int) (FileLimit, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return FileLimit{}, fmt.Errorf("api: read the open-file limit: %w", err)
	}
	return fileLimit(cfg.RPCMaxConnections, pools, rl.Cur)
}

func fileLimit(rpc, pools int, limit uint64) (FileLimit, error) {
	other := uint64(max(pools, 0)) + fileReserve
	room := int64(limit) - int64(other)
	fl := FileLimit{Limit: limit, RPCMaxConnections: rpc}
	if rpc == 0 {
		fl.RPCMaxConnections = int(min(room, defaultRPCMaxConnections))
		if fl.RPCMaxConnections < 1 {
			return fl, fmt.Errorf("server.rpc_max_connections: the process's open-file limit of %d (RLIMIT_NOFILE) leaves no room for /rpc sockets beside %d pool connections and %d other descriptors: raise the limit (ulimit -n, LimitNOFILE=, a container's nofile)",
				limit, pools, fileReserve)
		}
	}
	fl.Needed = uint64(fl.RPCMaxConnections) + other
	if fl.Needed > limit {
		return fl, fmt.Errorf("server.rpc_max_connections: %d sockets, with %d pool connections and %d other descriptors, need %d open files, over the process's limit of %d (RLIMIT_NOFILE): raise the limit (ulimit -n, LimitNOFILE=, a container's nofile) or set server.rpc_max_connections to at most %d (0 sizes it to the limit)",
			rpc, pools, fileReserve, fl.Needed, limit, max(room, 0))
	}
	return fl, nil
}
