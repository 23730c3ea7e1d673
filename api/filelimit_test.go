package api

import (
	"strings"
	"testing"
)

func TestFileLimitSizesTheSockets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rpc, pools int
		limit      uint64
		want       int    // sockets
		err        string // "" fits
	}{
		{"the default fits", 0, 40, 1 << 20, 20000, ""},
		{"the default lowered to the limit", 0, 40, 20000, 20000 - 40 - 1024, ""},
		{"an explicit value that fits", 5000, 40, 20000, 5000, ""},
		{"an explicit value equal to the limit", 20000, 40, 20000, 20000,
			"server.rpc_max_connections: 20000 sockets, with 40 pool connections and 1024 other descriptors, need 21064 open files, over the process's limit of 20000 (RLIMIT_NOFILE): raise the limit (ulimit -n, LimitNOFILE=, a container's nofile) or set server.rpc_max_connections to at most 18936"},
		{"no room at all", 0, 40, 1000, 0,
			"server.rpc_max_connections: the process's open-file limit of 1000 (RLIMIT_NOFILE) leaves no room"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fl, err := fileLimit(tc.rpc, tc.pools, tc.limit)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("fileLimit: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("fileLimit = %v, want %q", err, tc.err)
			case tc.err == "" && fl.RPCMaxConnections != tc.want:
				t.Fatalf("sockets %d, want %d", fl.RPCMaxConnections, tc.want)
			}
		})
	}
}
