package kubernetes

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// check runs every assertion on a rendered kustomization. secrets is the
// Secret contract the Deployments may read from.
func check(m *manifests, keys configKeys, secrets map[string][]string) []error {
	c := &checker{m: m, keys: keys, secrets: secrets}
	c.checkDeployments()
	c.checkJobs()
	c.checkImages()
	c.checkSecrets()
	c.checkServices()
	c.checkDisruptionBudgets()
	c.checkAutoscalers()
	c.checkNetworkPolicies()
	c.checkServiceMonitors()
	c.checkTracing()
	for _, cm := range m.configMaps {
		env := map[string]envVar{}
		for k, v := range cm.Data {
			env[k] = envVar{value: v}
		}
		c.checkEnvNames("ConfigMap "+cm.Name, env)
	}
	return c.errs
}

// checkServiceMonitors: each scrapes a named Service port, and with a bearer
// token from the Secret key every process reads as metrics.token.
func (c *checker) checkServiceMonitors() {
	for _, sm := range c.m.serviceMonitors {
		where := "ServiceMonitor " + sm.Name
		sel := sm.Spec.Selector
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(c.m.services, func(s *corev1.Service) bool {
				return c.selects(where, &sel, s.Labels) && slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
			}) {
				c.errorf("%s: endpoint port %q is no port of a Service it selects", where, ep.Port)
			}
			if ep.Authorization == nil || ep.Authorization.Credentials == nil {
				c.errorf("%s: endpoint %q sends no bearer token (metrics.token)", where, ep.Port)
				continue
			}
			want := ep.Authorization.Credentials.Name + "/" + ep.Authorization.Credentials.Key
			for _, d := range c.m.deployments {
				env := c.environment("Deployment "+d.Name, d.Spec.Template.Spec.Containers[0])
				if got := env["BALLET_METRICS_TOKEN"].secret; got != want {
					c.errorf("Deployment %s: metrics.token comes from %q, the ServiceMonitor sends %q", d.Name, got, want)
				}
				if d.Spec.Template.Annotations["prometheus.io/scrape"] == "true" {
					c.errorf("Deployment %s: annotated for scraping without the metrics token as well as by %s", d.Name, where)
				}
			}
		}
	}
}

// secretContract is the rendered Secrets' names and keys plus external
// ones (Secrets an overlay expects to exist in the cluster).
func secretContract(m *manifests, external map[string][]string) map[string][]string {
	out := maps.Clone(external)
	if out == nil {
		out = map[string][]string{}
	}
	for _, s := range m.secrets {
		keys := append(slices.Collect(maps.Keys(s.StringData)), slices.Collect(maps.Keys(s.Data))...)
		out[s.Name] = append(out[s.Name], keys...)
	}
	return out
}

func readmeKeys(t *testing.T) configKeys {
	t.Helper()
	keys, err := readConfigKeys(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func mustRender(t *testing.T, dir string) *manifests {
	t.Helper()
	m, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestManifests(t *testing.T) {
	t.Parallel()
	keys := readmeKeys(t)
	base := mustRender(t, "base")
	for _, tc := range []struct {
		name string
		dir  string
		// secrets: what the pods may read, beyond the rendered Secrets.
		secrets map[string][]string
		// want checks what this kustomization in particular must do.
		want func(t *testing.T, m *manifests)
	}{
		{name: "base", dir: "base", want: func(t *testing.T, m *manifests) {
			if len(m.secrets) != 2 {
				t.Errorf("base renders %d Secrets, want the 2 placeholders", len(m.secrets))
			}
			for _, s := range m.secrets {
				for k, v := range s.StringData {
					if !strings.Contains(v, "REPLACE-ME") {
						t.Errorf("Secret %s key %s: %q is not an obvious placeholder", s.Name, k, v)
					}
				}
			}
		}},
		{
			name:    "production",
			dir:     filepath.Join("overlays", "production"),
			secrets: mergeContract(secretContract(base, nil), map[string][]string{"ballet-metrics": {"token"}}),
			want: func(t *testing.T, m *manifests) {
				if len(m.secrets) != 0 {
					t.Errorf("production renders %d Secrets: base's placeholders would overwrite the real ones", len(m.secrets))
				}
				for _, d := range m.deployments {
					img := d.Spec.Template.Spec.Containers[0].Image
					name, tag, _ := strings.Cut(img, ":")
					if !strings.Contains(name, "/") || tag == "" || tag == "dev" || tag == "latest" {
						t.Errorf("Deployment %s: image %q is not a pinned registry image", d.Name, img)
					}
					if d.Namespace != "ballet" {
						t.Errorf("Deployment %s: namespace %q, want ballet", d.Name, d.Namespace)
					}
				}
				if len(m.serviceMonitors) != 1 {
					t.Errorf("production renders %d ServiceMonitors, want 1", len(m.serviceMonitors))
				}
				for _, h := range m.hpas {
					if *h.Spec.MinReplicas < 3 {
						t.Errorf("HorizontalPodAutoscaler %s: minReplicas %d, want at least 3 in production", h.Name, *h.Spec.MinReplicas)
					}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := mustRender(t, tc.dir)
			for _, err := range check(m, keys, mergeContract(secretContract(m, nil), tc.secrets)) {
				t.Error(err)
			}
			tc.want(t, m)
		})
	}
}

func mergeContract(a, b map[string][]string) map[string][]string {
	out := maps.Clone(a)
	for k, v := range b {
		out[k] = append(slices.Clone(out[k]), v...)
	}
	return out
}

// TestBrokenManifestsAreCaught renders the fixtures under testdata, each
// the base with one mistake, and wants the render or the checks to name it.
func TestBrokenManifestsAreCaught(t *testing.T) {
	t.Parallel()
	keys := readmeKeys(t)
	for _, tc := range []struct {
		fixture string
		want    string
	}{
		{"misspelt-replicas", `unknown field "spec.replica"`},
		{"misspelt-probe", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"wrong-case", `unknown field "spec.MinReplicas"`},
		{"duplicate-field", `mapping key "minReplicas" already defined`},
		{"misspelt-scaledobject", `unknown field "spec.triggers[0].metdata"`},
		{"unknown-kind", "unknown kind cert-manager.io/v1/Certificate"},
		{"replicas-set", "sets spec.replicas (3)"},
		{"unknown-env", "BALLET_SERVER_ADR is not a configuration key"},
		{"wrong-secret-key", `reads key "signing_key" of Secret ballet-gateway`},
		{"unused-secret-key", "Secret ballet-gateway: key spare is read by no container"},
		{"no-readiness", "Deployment ballet-worker readinessProbe: missing"},
		{"no-memory-limit", "Deployment ballet-gateway container gateway: no memory limit"},
		{"runs-as-root", "Job ballet-migrate: pod securityContext.runAsNonRoot is not true"},
		{"probe-undeclared-port", "livenessProbe: port 9999 is not a declared container port"},
		{"short-grace", "Deployment ballet-worker: terminationGracePeriodSeconds must exceed 25s"},
		{"gateway-open", "admits pods app.kubernetes.io/component=api,app.kubernetes.io/name=ballet to the gateway port, which is not the worker pods"},
		{"metrics-open", "Deployment ballet-worker: a NetworkPolicy admits anyone to the metrics port"},
		{"wrong-list", `listName "asynq:{planner}:active"`},
		{"scaler-other-redis", `the scaler reads Redis at "other:6379"`},
		{"misspelt-scaler-key", `trigger metadata "listname" is not a key`},
		{"no-postgresql-trigger", "no postgresql trigger on the planner's held-back and in-flight turns"},
		{"scaler-other-database", "connectionFromEnv names DATABASE_URL, which the worker container does not set"},
		{"held-back-only", "does not count planner_turns WHERE finished_at is null and enqueued_at is not null (planner_turns_due_heads_idx)"},
		{"misspelt-postgresql-key", `trigger metadata "targetQueryvalue" is not a key of KEDA's postgresql scaler`},
		{"no-migrate-wait", "Deployment ballet-api: no initContainer running `ballet migrate up`"},
		{"job-other-image", "containers run 2 images, want one"},
		{"loopback-metrics", `metrics.addr "127.0.0.1:8083" listens only on 127.0.0.1`},
		{"no-ephemeral-storage", "Deployment ballet-worker container migrate: no ephemeral-storage limit"},
		{"migrate-no-policy", "Job ballet-migrate: no Egress NetworkPolicy selects its pod"},
		{"migrate-egress-open", "Job ballet-migrate: NetworkPolicy ballet-migrate lets its pod reach TCP port 443, want only Postgres (TCP 5432, database.url) and DNS (53)"},
		{"migrate-other-db-port", "Job ballet-migrate: no NetworkPolicy lets its pod reach Postgres (TCP 6432, the port of database.url)"},
		{"migrate-ingress", "Job ballet-migrate: NetworkPolicy ballet-migrate admits traffic to its pod"},
		{"otel-service-unnamed", `Deployment ballet-worker: OTEL_SERVICE_NAME "", want "ballet-worker"`},
		{"otel-on", "Deployment ballet-api: OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 turns tracing on"},
		{"otel-misspelt", "OTEL_EXPORTER_OTLP_ENDPIONT is not an OpenTelemetry variable Ballet reads"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			t.Parallel()
			m, err := render(filepath.Join("testdata", tc.fixture))
			var errs []error
			if err != nil {
				errs = []error{err}
			} else {
				errs = check(m, keys, secretContract(m, nil))
			}
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if !slices.ContainsFunc(msgs, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("want an error containing %q, got %d:\n%s", tc.want, len(msgs), strings.Join(msgs, "\n"))
			}
		})
	}
}
