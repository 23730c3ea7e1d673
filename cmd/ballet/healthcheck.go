package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newHealthcheckCmd() *cobra.Command {
	var rawURL, path string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "exit 0 when a running process's /readyz answers 200 (the image's HEALTHCHECK)",
		Long: "GETs /readyz of a running process and exits 0 when it answers 200, 1 otherwise\n" +
			"with the reason on stderr. Without --url it asks this configuration's metrics\n" +
			"listener (metrics.addr; a wildcard host is asked on loopback), which every\n" +
			"process serves; --url http://127.0.0.1:8080 asks the api's own port.",
		Example: "  ballet healthcheck --timeout 4s\n  ballet healthcheck --url http://127.0.0.1:8080",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runHealthcheck(cmd.Context(), rawURL, path, timeout, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&rawURL, "url", "", "`URL` to GET (a URL without a path gets /readyz)")
	addConfigFlag(c, &path)
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return c
}

// runHealthcheck is `ballet healthcheck`: the image's HEALTHCHECK, which has
// no shell or curl to run. It GETs a process's /readyz and fails unless the
// answer is 200.
func runHealthcheck(ctx context.Context, rawURL, path string, timeout time.Duration, out io.Writer) error {
	if timeout <= 0 {
		return usageError{fmt.Sprintf("healthcheck: --timeout must be positive, got %s", timeout)}
	}
	target, err := healthcheckURL(rawURL, path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s: %s: %s", target, res.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(out, "healthcheck: GET %s: %s\n", target, res.Status)
	return nil
}

// healthcheckURL is --url with /readyz for an empty path, or /readyz of the
// metrics listener of the configuration at path.
func healthcheckURL(raw, path string) (string, error) {
	if raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", usageError{fmt.Sprintf("healthcheck: --url must be an http(s) URL, got %q", raw)}
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/readyz"
		}
		return u.String(), nil
	}
	cfg, err := LoadConfig(configPath(path), os.Environ())
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(cfg.Metrics.Addr)
	if err != nil {
		return "", fmt.Errorf("healthcheck: metrics.addr %q: %w", cfg.Metrics.Addr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}
