package kubernetes

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checker collects what is wrong with one rendered kustomization.
type checker struct {
	m    *manifests
	keys configKeys
	// secrets is the Secret contract: each Secret name and its keys, which
	// the Deployments may reference and must exist in the cluster.
	secrets map[string][]string
	errs    []error
}

func (c *checker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// drain is what a component's process does after SIGTERM, besides its
// preStop pause: the configuration key bounding it and any fixed extra.
var drain = map[string]struct {
	key   string
	extra time.Duration
}{
	// The api drains requests and sockets within server.shutdown_timeout.
	"api": {"BALLET_SERVER_SHUTDOWN_TIMEOUT", 0},
	// A worker gives its turns worker.shutdown_timeout, then up to 5 s to
	// hand their leases back.
	"worker": {"BALLET_WORKER_SHUTDOWN_TIMEOUT", 5 * time.Second},
	// The gateway drains within server.shutdown_timeout, then flushes usage
	// rows for up to 10 s.
	"gateway": {"BALLET_SERVER_SHUTDOWN_TIMEOUT", 10 * time.Second},
}

// publicAddr is the configuration key of each component's public port,
// which serves /healthz and /readyz.
var publicAddr = map[string]string{
	"api":     "BALLET_SERVER_ADDR",
	"worker":  "BALLET_WORKER_ADDR",
	"gateway": "BALLET_GATEWAY_ADDR",
}

// envVar is one variable of a container's environment.
type envVar struct {
	value  string // a literal or a ConfigMap's value
	secret string // "name/key" when it comes from a Secret
}

// environment resolves a container's variables as the kubelet would (env
// after envFrom), reporting references to ConfigMaps or Secrets that do not
// exist.
func (c *checker) environment(where string, ct corev1.Container) map[string]envVar {
	out := map[string]envVar{}
	for _, from := range ct.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm := c.configMap(from.ConfigMapRef.Name)
			if cm == nil {
				c.errorf("%s: envFrom names ConfigMap %s, which is not rendered", where, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				out[from.Prefix+k] = envVar{value: v}
			}
		case from.SecretRef != nil:
			keys, ok := c.secrets[from.SecretRef.Name]
			if !ok {
				c.errorf("%s: envFrom names Secret %s, which is not among %v", where, from.SecretRef.Name, c.secretNames())
			}
			for _, k := range keys {
				out[from.Prefix+k] = envVar{secret: from.SecretRef.Name + "/" + k}
			}
		}
	}
	for _, e := range ct.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = envVar{value: e.Value}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if !slices.Contains(c.secrets[ref.Name], ref.Key) {
				c.errorf("%s: %s reads key %q of Secret %s, which the Secrets do not have (they have %v)",
					where, e.Name, ref.Key, ref.Name, c.secrets)
			}
			out[e.Name] = envVar{secret: ref.Name + "/" + ref.Key}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := c.configMap(ref.Name)
			v, ok := "", false
			if cm != nil {
				v, ok = cm.Data[ref.Key]
			}
			if !ok {
				c.errorf("%s: %s reads key %q of ConfigMap %s, which is not rendered", where, e.Name, ref.Key, ref.Name)
			}
			out[e.Name] = envVar{value: v}
		default:
			out[e.Name] = envVar{}
		}
	}
	return out
}

func (c *checker) configMap(name string) *corev1.ConfigMap {
	for _, cm := range c.m.configMaps {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

func (c *checker) secretNames() []string {
	var names []string
	for n := range c.secrets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// setting is a configuration key's value in env, else its default.
func (c *checker) setting(env map[string]envVar, key string) string {
	if v, ok := env[key]; ok {
		return v.value
	}
	return c.keys[key]
}

// checkEnvNames: a BALLET_ variable that is not a configuration key stops
// the process at start; an OTEL_ one must be one the process reads; any
// other name must be one the ScaledObjects read.
func (c *checker) checkEnvNames(where string, env map[string]envVar) {
	for name := range env {
		if strings.HasPrefix(name, "BALLET_") {
			if _, ok := c.keys[name]; !ok {
				c.errorf("%s: %s is not a configuration key (README.md's table); the process would refuse to start", where, name)
			}
			continue
		}
		if strings.HasPrefix(name, "OTEL_") {
			if !isOTelVariable(name) {
				c.errorf("%s: %s is not an OpenTelemetry variable Ballet reads (%v)", where, name, otelVariables)
			}
			continue
		}
		if !slices.Contains(c.scalerEnvNames(), name) {
			c.errorf("%s: %s is neither a BALLET_ configuration variable, an OTEL_ one nor read by a ScaledObject", where, name)
		}
	}
}

// checkPod checks what every Ballet pod needs: the security context, CPU,
// memory and ephemeral-storage requests and limits on every container
// (init containers too), and known variables.
func (c *checker) checkPod(where string, spec corev1.PodSpec) {
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		c.errorf("%s: pod securityContext.runAsNonRoot is not true", where)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		c.errorf("%s: automountServiceAccountToken is not false (Ballet does not call the Kubernetes API)", where)
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, ct := range all {
		cw := where + " container " + ct.Name
		sc := ct.SecurityContext
		switch {
		case sc == nil:
			c.errorf("%s: no securityContext", cw)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			c.errorf("%s: readOnlyRootFilesystem is not true", cw)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			c.errorf("%s: allowPrivilegeEscalation is not false", cw)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			c.errorf("%s: capabilities do not drop ALL (and add none)", cw)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			req, hasReq := ct.Resources.Requests[res]
			lim, hasLim := ct.Resources.Limits[res]
			switch {
			case !hasReq || req.IsZero():
				c.errorf("%s: no %s request", cw, res)
			case !hasLim || lim.IsZero():
				c.errorf("%s: no %s limit", cw, res)
			case req.Cmp(lim) > 0:
				c.errorf("%s: %s request %s above its limit %s", cw, res, req.String(), lim.String())
			}
		}
		c.checkEnvNames(cw, c.environment(cw, ct))
	}
}

// checkDeployments checks each process's Deployment: its command, probes on
// declared ports, drain time, schema wait, autoscaler and metrics port.
func (c *checker) checkDeployments() {
	seen := map[string]bool{}
	for _, d := range c.m.deployments {
		where := "Deployment " + d.Name
		spec := d.Spec.Template.Spec
		c.checkPod(where, spec)
		component := d.Spec.Template.Labels["app.kubernetes.io/component"]
		seen[component] = true
		if _, ok := publicAddr[component]; !ok || len(spec.Containers) != 1 {
			c.errorf("%s: want one container of component api, worker or gateway, got %d of %q", where, len(spec.Containers), component)
			continue
		}
		if d.Spec.Replicas != nil {
			c.errorf("%s: sets spec.replicas (%d); its autoscaler owns the replica count, and every apply would reset it", where, *d.Spec.Replicas)
		}
		ct := spec.Containers[0]
		if len(ct.Args) == 0 || ct.Args[0] != component {
			c.errorf("%s: runs %v %v, want `ballet %s`", where, ct.Command, ct.Args, component)
		}
		env := c.environment(where, ct)
		port := c.addrPort(where, publicAddr[component], c.setting(env, publicAddr[component]))
		c.checkProbe(where+" readinessProbe", ct, ct.ReadinessProbe, "/readyz", port)
		c.checkProbe(where+" livenessProbe", ct, ct.LivenessProbe, "/healthz", port)
		metricsAddr := c.setting(env, "BALLET_METRICS_ADDR")
		if host, _, _ := net.SplitHostPort(metricsAddr); host != "" && host != "0.0.0.0" && host != "::" {
			c.errorf("%s: metrics.addr %q listens only on %s; Prometheus cannot reach it in a pod", where, metricsAddr, host)
		}
		metricsPort := c.addrPort(where, "BALLET_METRICS_ADDR", metricsAddr)
		if !declares(ct, intstr.FromString("metrics"), metricsPort) {
			c.errorf("%s: no container port named metrics on %d (metrics.addr)", where, metricsPort)
		}
		if a := d.Spec.Template.Annotations; a["prometheus.io/scrape"] == "true" && a["prometheus.io/port"] != strconv.Itoa(int(metricsPort)) {
			c.errorf("%s: prometheus.io/port %q is not the metrics port %d", where, a["prometheus.io/port"], metricsPort)
		}
		c.checkGrace(where, component, spec, ct, env)
		if !slices.ContainsFunc(spec.InitContainers, func(ic corev1.Container) bool {
			return slices.Equal(ic.Args, []string{"migrate", "up"})
		}) {
			c.errorf("%s: no initContainer running `ballet migrate up`: its pods would not wait for the schema", where)
		}
	}
	for component := range publicAddr {
		if !seen[component] {
			c.errorf("no Deployment of component %s", component)
		}
	}
}

// addrPort is the port of a host:port setting.
func (c *checker) addrPort(where, key, addr string) int32 {
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.ParseInt(p, 10, 32)
	if err != nil || err2 != nil {
		c.errorf("%s: %s = %q is not host:port", where, key, addr)
	}
	return int32(n)
}

// checkProbe: an HTTP GET of path on a port the container declares, the
// process's public port.
func (c *checker) checkProbe(where string, ct corev1.Container, p *corev1.Probe, path string, want int32) {
	if p == nil || p.HTTPGet == nil {
		c.errorf("%s: missing (want an httpGet of %s)", where, path)
		return
	}
	if p.HTTPGet.Path != path {
		c.errorf("%s: path %s, want %s", where, p.HTTPGet.Path, path)
	}
	if !declares(ct, p.HTTPGet.Port, want) {
		c.errorf("%s: port %s is not a declared container port on %d", where, p.HTTPGet.Port.String(), want)
	}
}

// declares reports whether ct declares port (by name or number) as
// containerPort number.
func declares(ct corev1.Container, port intstr.IntOrString, number int32) bool {
	return slices.ContainsFunc(ct.Ports, func(p corev1.ContainerPort) bool {
		named := port.Type == intstr.String && p.Name == port.StrVal
		numbered := port.Type == intstr.Int && p.ContainerPort == port.IntVal
		return (named || numbered) && p.ContainerPort == number
	})
}

// checkGrace: the pod is given longer than its preStop pause plus the
// process's drain before it is killed.
func (c *checker) checkGrace(where, component string, spec corev1.PodSpec, ct corev1.Container, env map[string]envVar) {
	dr := drain[component]
	timeout, err := time.ParseDuration(c.setting(env, dr.key))
	if err != nil {
		c.errorf("%s: %s: %v", where, dr.key, err)
		return
	}
	need := timeout + dr.extra
	if ct.Lifecycle != nil && ct.Lifecycle.PreStop != nil && ct.Lifecycle.PreStop.Sleep != nil {
		need += time.Duration(ct.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if spec.TerminationGracePeriodSeconds == nil || time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second <= need {
		c.errorf("%s: terminationGracePeriodSeconds must exceed %s (preStop + %s %s + %s)", where, need, dr.key, timeout, dr.extra)
	}
}

// checkJobs: the migration Job runs `ballet migrate up` in a pod like the
// others.
func (c *checker) checkJobs() {
	migrate := false
	for _, j := range c.m.jobs {
		c.checkPod("Job "+j.Name, j.Spec.Template.Spec)
		for _, ct := range j.Spec.Template.Spec.Containers {
			migrate = migrate || slices.Equal(ct.Args, []string{"migrate", "up"})
		}
	}
	if !migrate {
		c.errorf("no Job runs `ballet migrate up`")
	}
}

// checkSecrets: every key of the rendered Secrets is one some container
// reads, and none reads a key they lack (checked in environment).
func (c *checker) checkSecrets() {
	read := map[string]bool{}
	for _, spec := range c.podSpecs() {
		for _, ct := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			for _, e := range ct.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					read[e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key] = true
				}
			}
		}
	}
	for _, s := range c.m.secrets {
		keys := slices.Collect(maps.Keys(s.StringData))
		keys = append(keys, slices.Collect(maps.Keys(s.Data))...)
		for _, k := range keys {
			if !read[s.Name+"/"+k] {
				c.errorf("Secret %s: key %s is read by no container", s.Name, k)
			}
		}
	}
}

// checkImages: every container of every pod runs the one image, so that
// the migrations applied are the release's.
func (c *checker) checkImages() {
	images := map[string][]string{}
	for _, spec := range c.podSpecs() {
		for _, ct := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			images[ct.Image] = append(images[ct.Image], ct.Name)
		}
	}
	if len(images) != 1 {
		c.errorf("containers run %d images, want one: %v", len(images), images)
	}
}

func (c *checker) podSpecs() []corev1.PodSpec {
	var specs []corev1.PodSpec
	for _, d := range c.m.deployments {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, j := range c.m.jobs {
		specs = append(specs, j.Spec.Template.Spec)
	}
	return specs
}
