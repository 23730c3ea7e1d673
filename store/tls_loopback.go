package store

import (
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// plainOnLoopback turns TLS off for a database on this machine when the URL
// leaves the choice to the default. That default, sslmode=prefer (libpq's
// and pgx's), sets up TLS whenever the server offers it, without checking
// the server's certificate; on a loopback address the traffic never leaves
// the host, so TLS protects nothing there and costs about 15 % of a turn's
// CPU (the handshake once per connection, then every statement encrypted
// on both sides). A URL that names sslmode or any other ssl* parameter,
// or PGSSLMODE in the environment, is kept as it is, as is any URL with a
// host that is not loopback.
func plainOnLoopback(pc *pgxpool.Config, rawURL string) {
	if choosesTLS(rawURL) || !onLoopback(pc.ConnConfig.Host) {
		return
	}
	for _, fb := range pc.ConnConfig.Fallbacks {
		if !onLoopback(fb.Host) {
			return
		}
	}
	pc.ConnConfig.TLSConfig = nil
	var plain []*pgconn.FallbackConfig
	for _, fb := range pc.ConnConfig.Fallbacks {
		// prefer lists each host with TLS, then without: keep the latter,
		// once, and not the primary again.
		if fb.TLSConfig != nil || (fb.Host == pc.ConnConfig.Host && fb.Port == pc.ConnConfig.Port) {
			continue
		}
		plain = append(plain, fb)
	}
	pc.ConnConfig.Fallbacks = plain
}

// choosesTLS reports whether the URL (or keyword/value string) or the
// environment says anything about TLS.
func choosesTLS(rawURL string) bool {
	if os.Getenv("PGSSLMODE") != "" {
		return true
	}
	if strings.HasPrefix(rawURL, "postgres://") || strings.HasPrefix(rawURL, "postgresql://") {
		u, err := url.Parse(rawURL)
		if err != nil {
			return true
		}
		for k := range u.Query() {
			if strings.HasPrefix(strings.ToLower(k), "ssl") {
				return true
			}
		}
		return false
	}
	return strings.Contains(strings.ToLower(rawURL), "ssl")
}

// onLoopback reports whether host is a loopback address, localhost or a
// Unix socket directory.
func onLoopback(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
