package monitoring

import (
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/strutil"
	"go.yaml.in/yaml/v3"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// loadConfig loads prometheus/prometheus.yml as Prometheus does at start.
func loadConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.LoadFile(filepath.Join("prometheus", "prometheus.yml"), false, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestPrometheusConfig: the example prometheus.yml loads with Prometheus's
// configuration loader (strict: an unknown or misplaced field fails), its
// rule files parse as Prometheus parses them, and it names an absolute URL
// for the alerts' runbook links.
func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	cfg := loadConfig(t)
	if len(cfg.RuleFiles) != 1 || filepath.Base(cfg.RuleFiles[0]) != "rules.yml" {
		t.Errorf("rule_files %v, want rules.yml", cfg.RuleFiles)
	}
	for _, f := range cfg.RuleFiles {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), quiet)
		for _, err := range errs {
			t.Error(err)
		}
		if groups != nil && len(groups.Groups) == 0 {
			t.Errorf("%s: no rule groups", f)
		}
	}
	runbooks := cfg.GlobalConfig.ExternalLabels.Get("ballet_runbooks_url")
	if u, err := url.Parse(runbooks); err != nil || !u.IsAbs() || u.Host == "" {
		t.Errorf("external label ballet_runbooks_url %q: want an absolute URL", runbooks)
	}
	scs, err := cfg.GetScrapeConfigs()
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]bool{}
	for _, sc := range scs {
		jobs[sc.JobName] = true
	}
	for _, want := range []string{"ballet", "ballet-serve"} {
		if !jobs[want] {
			t.Errorf("no scrape job %s (jobs %v)", want, jobs)
		}
	}
}

// pod is a Deployment's pod template from deploy/kubernetes/base, as much
// of it as Prometheus's pod discovery turns into labels.
type pod struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// basePods reads the Deployments of deploy/kubernetes/base.
func basePods(t *testing.T) []pod {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "kubernetes", "base", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pods []pod
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var p pod
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if p.Kind == "Deployment" {
				pods = append(pods, p)
			}
		}
	}
	if len(pods) != 3 {
		t.Fatalf("%d Deployments in deploy/kubernetes/base, want the api, worker and gateway", len(pods))
	}
	return pods
}

// TestKubernetesPodsScraped: the job "ballet" is Kubernetes pod discovery,
// and its relabeling, run by Prometheus's own code on the targets pod
// discovery makes of the base's pods (one per container port), scrapes each
// pod once on its metrics port at /metrics, labelled with its component; a
// pod annotated prometheus.io/scrape "false" (the production overlay's) is
// not scraped.
func TestKubernetesPodsScraped(t *testing.T) {
	t.Parallel()
	var job *config.ScrapeConfig
	scs, err := loadConfig(t).GetScrapeConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scs {
		if sc.JobName == "ballet" {
			job = sc
		}
	}
	if job == nil {
		t.Fatal("no scrape job ballet")
	}
	sd, ok := job.ServiceDiscoveryConfigs[0].(*kubernetes.SDConfig)
	if len(job.ServiceDiscoveryConfigs) != 1 || !ok || sd.Role != kubernetes.RolePod {
		t.Fatalf("job ballet discovers %v, want Kubernetes pods", job.ServiceDiscoveryConfigs)
	}
	for _, p := range basePods(t) {
		meta := p.Spec.Template.Metadata
		metrics := 0
		var targets []labels.Labels
		for _, ct := range p.Spec.Template.Spec.Containers {
			for _, port := range ct.Ports {
				if port.Name == "metrics" {
					metrics = port.ContainerPort
				}
				lb := labels.NewBuilder(labels.EmptyLabels())
				lb.Set(model.AddressLabel, "10.1.2.3:"+strconv.Itoa(port.ContainerPort))
				lb.Set(model.MetricsPathLabel, job.MetricsPath)
				lb.Set("__meta_kubernetes_namespace", "ballet")
				lb.Set("__meta_kubernetes_pod_name", p.Metadata.Name+"-6d9f7-x2x4q")
				lb.Set("__meta_kubernetes_pod_container_port_number", strconv.Itoa(port.ContainerPort))
				for k, v := range meta.Labels {
					lb.Set("__meta_kubernetes_pod_label_"+strutil.SanitizeLabelName(k), v)
				}
				for k, v := range meta.Annotations {
					lb.Set("__meta_kubernetes_pod_annotation_"+strutil.SanitizeLabelName(k), v)
				}
				if relabel.ProcessBuilder(lb, job.RelabelConfigs...) {
					targets = append(targets, lb.Labels())
				}
				lb.Set("__meta_kubernetes_pod_annotation_prometheus_io_scrape", "false")
				if relabel.ProcessBuilder(lb, job.RelabelConfigs...) {
					t.Errorf("Deployment %s: a pod annotated prometheus.io/scrape \"false\" is scraped", p.Metadata.Name)
				}
			}
		}
		want := "10.1.2.3:" + strconv.Itoa(metrics)
		for _, tg := range targets {
			if got := tg.Get(model.AddressLabel); got != want || tg.Get(model.MetricsPathLabel) != "/metrics" ||
				tg.Get("component") != meta.Labels["app.kubernetes.io/component"] {
				t.Errorf("Deployment %s: scraped at %s%s with component %q, want %s/metrics, component %q",
					p.Metadata.Name, got, tg.Get(model.MetricsPathLabel), tg.Get("component"), want, meta.Labels["app.kubernetes.io/component"])
			}
		}
		if metrics == 0 || len(targets) == 0 {
			t.Errorf("Deployment %s: metrics port %d, %d targets kept; want its metrics port scraped", p.Metadata.Name, metrics, len(targets))
		}
	}
}
