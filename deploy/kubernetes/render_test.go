package kubernetes

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests is one rendered kustomization, every object decoded into its
// API type.
type manifests struct {
	deployments     []*appsv1.Deployment
	jobs            []*batchv1.Job
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	namespaces      []*corev1.Namespace
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	policies        []*networkingv1.NetworkPolicy
	scaledObjects   []*kedav1alpha1.ScaledObject
	serviceMonitors []*monitoringv1.ServiceMonitor
}

// kinds maps apiVersion/kind to a new object of its API type and where it
// goes in manifests. A kind missing here fails the render.
var kinds = map[string]func(m *manifests) any{
	"apps/v1/Deployment": func(m *manifests) any {
		return appendNew(&m.deployments)
	},
	"batch/v1/Job": func(m *manifests) any { return appendNew(&m.jobs) },
	"v1/Service":   func(m *manifests) any { return appendNew(&m.services) },
	"v1/ConfigMap": func(m *manifests) any { return appendNew(&m.configMaps) },
	"v1/Secret":    func(m *manifests) any { return appendNew(&m.secrets) },
	"v1/Namespace": func(m *manifests) any { return appendNew(&m.namespaces) },
	"policy/v1/PodDisruptionBudget": func(m *manifests) any {
		return appendNew(&m.pdbs)
	},
	"autoscaling/v2/HorizontalPodAutoscaler": func(m *manifests) any {
		return appendNew(&m.hpas)
	},
	"networking.k8s.io/v1/NetworkPolicy": func(m *manifests) any {
		return appendNew(&m.policies)
	},
	"keda.sh/v1alpha1/ScaledObject": func(m *manifests) any {
		return appendNew(&m.scaledObjects)
	},
	"monitoring.coreos.com/v1/ServiceMonitor": func(m *manifests) any {
		return appendNew(&m.serviceMonitors)
	},
}

// appendNew appends a new zero object to list and returns it.
func appendNew[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

// kustomizeMu serialises kustomize builds: kyaml keeps its OpenAPI schema
// in package globals that it sets up and swaps without locking, so
// concurrent Kustomizer.Run calls race (kubernetes-sigs/kustomize issues
// 4824 and 5805). Decoding and checking still run in parallel.
var kustomizeMu sync.Mutex

// render builds the kustomization in dir with kustomize's Go API and
// decodes every object strictly.
func render(dir string) (*manifests, error) {
	docs, err := build(dir)
	if err != nil {
		return nil, err
	}
	m := &manifests{}
	for _, d := range docs {
		newObj, ok := kinds[d.id]
		if !ok {
			return nil, fmt.Errorf("%s: unknown kind %s (no API type to check it against)", d.name, d.id)
		}
		if err := decodeStrict(d.yaml, newObj(m)); err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return m, nil
}

// document is one object kustomize rendered.
type document struct {
	id   string // apiVersion/kind
	name string // for messages: "apps/v1/Deployment ballet-api"
	yaml []byte
}

// kustomize runs kustomize on dir, holding kustomizeMu.
func kustomize(dir string) (resmap.ResMap, error) {
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return rm, nil
}

// build runs kustomize on dir and returns each object.
func build(dir string) ([]document, error) {
	rm, err := kustomize(dir)
	if err != nil {
		return nil, err
	}
	var docs []document
	for _, r := range rm.Resources() {
		d := document{id: r.GetApiVersion() + "/" + r.GetKind()}
		d.name = d.id + " " + r.GetName()
		if d.yaml, err = r.AsYAML(); err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// decodeStrict decodes YAML into obj the way the API server's strict field
// validation does: field names are case-sensitive, and an unknown or
// duplicate field is an error.
func decodeStrict(y []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(y)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("strict decoding: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// configKeys are the configuration keys README.md documents, by environment
// variable (BALLET_PLANNER_MAX_ROUNDS), with their defaults as written there
// (backquotes removed).
type configKeys map[string]string

// readmeRow is one row of README.md's configuration table:
// | `planner.max_rounds` | `20` | ... |
var readmeRow = regexp.MustCompile("^\\| `([a-z][a-z0-9_.]*)` \\| `?([^|`]*)`? \\|")

// readConfigKeys reads the configuration table of README.md, which
// cmd/ballet's TestReadmeDocumentsEveryKey keeps equal to the keys the code
// has.
func readConfigKeys(path string) (configKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys := configKeys{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := readmeRow.FindStringSubmatch(line); m != nil && strings.Contains(m[1], ".") {
			keys[envName(m[1])] = strings.Trim(m[2], `"`)
		}
	}
	// A table that moved or changed shape must fail here, not let every
	// variable through.
	for _, must := range []string{"BALLET_SERVER_ADDR", "BALLET_WORKER_SHUTDOWN_TIMEOUT", "BALLET_METRICS_ADDR", "BALLET_GATEWAY_SIGNING_KEY"} {
		if _, ok := keys[must]; !ok {
			return nil, fmt.Errorf("%s: configuration table not found (no %s among %d keys)", path, must, len(keys))
		}
	}
	return keys, nil
}

// envName is the environment variable of a key, as cmd/ballet names it:
// planner.max_rounds is BALLET_PLANNER_MAX_ROUNDS.
func envName(key string) string {
	return "BALLET_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}
