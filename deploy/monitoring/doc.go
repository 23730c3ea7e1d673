// Package monitoring holds Ballet's Prometheus configuration, rules and
// Grafana dashboard, and a test that loads the example prometheus.yml with
// upstream Prometheus's own configuration loader (Debian's promtool is
// built without Kubernetes service discovery, so it cannot). It is a module
// of its own, so that Prometheus and its Kubernetes client stay out of the
// product's go.mod.
package monitoring
