package main

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestMonitoringScrapeConfig: the example prometheus.yml loads rules.yml,
// names where the runbook links lead, discovers pods by the prometheus.io
// annotations the Kubernetes manifests set and scrapes `ballet serve` on the
// default metrics.addr. (deploy/monitoring's own test loads it with
// Prometheus's config loader.)
func TestMonitoringScrapeConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "prometheus", "prometheus.yml"))
	must(t, err)
	var cfg struct {
		Global struct {
			ExternalLabels map[string]string `yaml:"external_labels"`
		} `yaml:"global"`
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			KubernetesSD   []any  `yaml:"kubernetes_sd_configs"`
			RelabelConfigs []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
			} `yaml:"relabel_configs"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	must(t, yaml.Unmarshal(b, &cfg))
	if !slices.Contains(cfg.RuleFiles, "rules.yml") {
		t.Errorf("rule_files %v lack rules.yml", cfg.RuleFiles)
	}
	if u, err := url.Parse(cfg.Global.ExternalLabels["ballet_runbooks_url"]); err != nil || !u.IsAbs() || u.Host == "" {
		t.Errorf("external label ballet_runbooks_url %q: want an absolute URL, where the alerts' runbook_url links lead",
			cfg.Global.ExternalLabels["ballet_runbooks_url"])
	}
	used, static := map[string]bool{}, false
	defaultAddr := DefaultConfig().Metrics.Addr
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			static = true
			if !slices.Contains(st.Targets, defaultAddr) {
				t.Errorf("job %s: targets %v, want the default metrics.addr %s", sc.JobName, st.Targets, defaultAddr)
			}
		}
		for _, rc := range sc.RelabelConfigs {
			for _, l := range rc.SourceLabels {
				if a, ok := strings.CutPrefix(l, "__meta_kubernetes_pod_annotation_"); ok {
					used[a] = true
				}
			}
			if _, err := regexp.Compile(rc.Regex); err != nil {
				t.Errorf("job %s: regex %q: %v", sc.JobName, rc.Regex, err)
			}
		}
	}
	if !static {
		t.Error("prometheus.yml has no static example target")
	}
	manifests, err := filepath.Glob("../../deploy/kubernetes/base/*.yaml")
	must(t, err)
	annotated := map[string]bool{}
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		must(t, err)
		for _, a := range regexp.MustCompile(`(prometheus\.io/\w+):`).FindAllStringSubmatch(string(b), -1) {
			annotated[regexp.MustCompile(`[^a-z0-9]`).ReplaceAllString(a[1], "_")] = true
		}
	}
	if len(annotated) == 0 {
		t.Fatal("no prometheus.io annotations in deploy/kubernetes/base")
	}
	for a := range annotated {
		if !used[a] {
			t.Errorf("the manifests annotate %s but prometheus.yml does not read it", a)
		}
	}
}
