package kubernetes

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// redisScalerKeys are the trigger metadata keys KEDA's redis scaler reads
// (pkg/scalers/redis_scaler.go, the keda:"name=..." tags, and their
// ...FromEnv forms). Trigger metadata is a string map, so strict decoding
// cannot catch a misspelt key: this list does.
var redisScalerKeys = []string{
	"address", "addressFromEnv", "host", "hostFromEnv", "port", "portFromEnv",
	"username", "usernameFromEnv", "password", "passwordFromEnv",
	"listName", "listLength", "activationListLength", "databaseIndex", "enableTLS", "unsafeSsl",
}

// postgresqlScalerKeys are the trigger metadata keys KEDA's postgresql
// scaler reads (pkg/scalers/postgresql_scaler.go; connection and password
// also as ...FromEnv).
var postgresqlScalerKeys = []string{
	"connection", "connectionFromEnv", "host", "port", "userName", "dbName", "sslmode",
	"password", "passwordFromEnv", "query", "targetQueryValue", "activationTargetQueryValue",
}

// selects reports whether sel selects a pod with these labels, as the API
// does: a nil selector selects nothing, an empty one every pod.
func (c *checker) selects(where string, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		c.errorf("%s: selector: %v", where, err)
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

// deployment is the Deployment named name, or nil.
func (c *checker) deployment(name string) *appsv1.Deployment {
	for _, d := range c.m.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// checkServices: each Service selects one Deployment's pods and targets
// ports their container declares.
func (c *checker) checkServices() {
	for _, s := range c.m.services {
		where := "Service " + s.Name
		var target *appsv1.Deployment
		for _, d := range c.m.deployments {
			if len(s.Spec.Selector) > 0 && c.selects(where, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, d.Spec.Template.Labels) {
				target = d
			}
		}
		if target == nil {
			c.errorf("%s: selects no Deployment's pods", where)
			continue
		}
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(target.Spec.Template.Spec.Containers, func(ct corev1.Container) bool {
				return slices.ContainsFunc(ct.Ports, func(cp corev1.ContainerPort) bool {
					return p.TargetPort == intstr.FromString(cp.Name) || p.TargetPort == intstr.FromInt32(cp.ContainerPort)
				})
			}) {
				c.errorf("%s: port %s targets %s, which Deployment %s does not declare", where, p.Name, p.TargetPort.String(), target.Name)
			}
		}
	}
}

// checkDisruptionBudgets: every Deployment's pods have a budget.
func (c *checker) checkDisruptionBudgets() {
	for _, d := range c.m.deployments {
		if !slices.ContainsFunc(c.m.pdbs, func(p *policyv1.PodDisruptionBudget) bool {
			return c.selects("PodDisruptionBudget "+p.Name, p.Spec.Selector, d.Spec.Template.Labels)
		}) {
			c.errorf("Deployment %s: no PodDisruptionBudget selects its pods", d.Name)
		}
	}
}

// checkAutoscalers: HorizontalPodAutoscalers scale the api and the gateway,
// a ScaledObject the workers, each with sane bounds on a Deployment that
// exists; every Deployment has exactly one.
func (c *checker) checkAutoscalers() {
	scaled := map[string]int{}
	for _, h := range c.m.hpas {
		where := "HorizontalPodAutoscaler " + h.Name
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || c.deployment(ref.Name) == nil {
			c.errorf("%s: scales %s %s %s, not a rendered Deployment", where, ref.APIVersion, ref.Kind, ref.Name)
			continue
		}
		scaled[ref.Name]++
		// Two at least, so that the budget's one disruption leaves one.
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			c.errorf("%s: bounds %s..%d, want 2 <= min <= max", where, count(h.Spec.MinReplicas), h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) == 0 {
			c.errorf("%s: no metrics", where)
		}
	}
	for _, so := range c.m.scaledObjects {
		where := "ScaledObject " + so.Name
		ref := so.Spec.ScaleTargetRef
		d := (*appsv1.Deployment)(nil)
		if ref != nil && (ref.Kind == "" || ref.Kind == "Deployment") && (ref.APIVersion == "" || ref.APIVersion == "apps/v1") {
			d = c.deployment(ref.Name)
		}
		if d == nil || d.Spec.Template.Labels["app.kubernetes.io/component"] != "worker" {
			c.errorf("%s: does not target the worker Deployment (%+v)", where, ref)
			continue
		}
		scaled[d.Name]++
		if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || *so.Spec.MinReplicaCount < 1 ||
			*so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
			c.errorf("%s: bounds %s..%s, want 1 <= min <= max", where, count(so.Spec.MinReplicaCount), count(so.Spec.MaxReplicaCount))
		}
		c.checkTriggers(where, so.Spec.Triggers, d)
	}
	for _, d := range c.m.deployments {
		if scaled[d.Name] != 1 {
			c.errorf("Deployment %s: scaled by %d autoscalers, want exactly 1", d.Name, scaled[d.Name])
		}
	}
}

// count prints an optional replica count.
func count(n *int32) string {
	if n == nil {
		return "unset"
	}
	return strconv.Itoa(int(*n))
}

// checkTriggers: exactly one postgresql trigger on the planner's demand for
// slots and one redis trigger on the queue's pending list, nothing else.
func (c *checker) checkTriggers(where string, triggers []kedav1alpha1.ScaleTriggers, d *appsv1.Deployment) {
	byType := map[string][]kedav1alpha1.ScaleTriggers{}
	for _, t := range triggers {
		byType[t.Type] = append(byType[t.Type], t)
	}
	for typ, ts := range byType {
		if typ != "redis" && typ != "postgresql" || len(ts) != 1 {
			c.errorf("%s: %d %s triggers, want one postgresql and one redis trigger", where, len(ts), typ)
		}
	}
	ct := d.Spec.Template.Spec.Containers[0]
	env := c.environment(where, ct)
	if ts := byType["postgresql"]; len(ts) == 0 {
		c.errorf("%s: no postgresql trigger on the planner's held-back and in-flight turns: a pool full under fair scheduling would never grow", where)
	} else {
		c.checkPostgresqlTrigger(where, ts[0], env)
	}
	if ts := byType["redis"]; len(ts) == 0 {
		c.errorf("%s: no redis trigger on the planner queue's pending list", where)
	} else {
		c.checkRedisTrigger(where, ts[0].Metadata, env)
	}
}

// checkRedisTrigger: the redis trigger reads the planner queue's pending
// list, on the Redis server and database the workers use.
func (c *checker) checkRedisTrigger(where string, md map[string]string, env map[string]envVar) {
	for k := range md {
		if !slices.Contains(redisScalerKeys, k) {
			c.errorf("%s: trigger metadata %q is not a key of KEDA's redis scaler", where, k)
		}
	}
	ns := c.setting(env, "BALLET_REDIS_NAMESPACE")
	if want := "asynq:{" + ns + "planner}:pending"; md["listName"] != want {
		c.errorf("%s: listName %q, want the planner queue's pending list %q", where, md["listName"], want)
	}
	u, err := url.Parse(c.setting(env, "BALLET_REDIS_URL"))
	if err != nil || u.Scheme != "redis" && u.Scheme != "rediss" {
		c.errorf("%s: the workers' redis.url %q is not a redis:// URL", where, c.setting(env, "BALLET_REDIS_URL"))
		return
	}
	addr := md["address"]
	if name := md["addressFromEnv"]; name != "" {
		addr = env[name].value
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != u.Hostname() || port != u.Port() {
		c.errorf("%s: the scaler reads Redis at %q, the workers at %s", where, addr, u.Host)
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != md["databaseIndex"] && !(db == "" && md["databaseIndex"] == "0") {
		c.errorf("%s: databaseIndex %q, the workers use database %q", where, md["databaseIndex"], db)
	}
}

// checkPostgresqlTrigger: the postgresql trigger connects with the
// workers' database.url, counts the turns of the ready index (held back)
// and of the due-heads index (dispatched, not ended), and adds a worker per
// at most worker.concurrency of them.
func (c *checker) checkPostgresqlTrigger(where string, t kedav1alpha1.ScaleTriggers, env map[string]envVar) {
	md := t.Metadata
	for k := range md {
		if !slices.Contains(postgresqlScalerKeys, k) {
			c.errorf("%s: trigger metadata %q is not a key of KEDA's postgresql scaler", where, k)
		}
	}
	if md["connection"] != "" || md["password"] != "" {
		c.errorf("%s: the postgresql trigger has the database's credentials in its metadata; read them with connectionFromEnv", where)
	}
	db, ok := env["BALLET_DATABASE_URL"]
	switch name := md["connectionFromEnv"]; {
	case t.AuthenticationRef != nil:
		// A TriggerAuthentication: not rendered here, so not checkable.
	case name == "":
		c.errorf("%s: the postgresql trigger has no connectionFromEnv (the workers' database.url)", where)
	case !ok:
		c.errorf("%s: the worker container has no BALLET_DATABASE_URL", where)
	default:
		got, set := env[name]
		if !set {
			c.errorf("%s: connectionFromEnv names %s, which the worker container does not set", where, name)
		} else if got != db {
			c.errorf("%s: the scaler reads Postgres from %s (%+v), the workers from BALLET_DATABASE_URL (%+v)", where, name, got, db)
		}
	}
	q := normalizeSQL(md["query"])
	for _, idx := range []string{"planner_turns_ready_idx", "planner_turns_due_heads_idx"} {
		pred, err := indexPredicate(idx)
		if err != nil {
			c.errorf("%s: %v", where, err)
			continue
		}
		if !slices.ContainsFunc(countQueries.FindAllStringSubmatch(q, -1), func(m []string) bool {
			return slices.Equal(conjuncts(m[1]), conjuncts(pred))
		}) {
			c.errorf("%s: query %q does not count planner_turns WHERE %s (%s)", where, md["query"], pred, idx)
		}
	}
	target, err := strconv.ParseFloat(md["targetQueryValue"], 64)
	concurrency, err2 := strconv.Atoi(c.setting(env, "BALLET_WORKER_CONCURRENCY"))
	if err != nil || err2 != nil || target <= 0 || target > float64(concurrency) {
		c.errorf("%s: targetQueryValue %q, want turns per worker, at most worker.concurrency (%s)", where, md["targetQueryValue"], c.setting(env, "BALLET_WORKER_CONCURRENCY"))
	}
	if a, ok := md["activationTargetQueryValue"]; ok {
		if v, err := strconv.ParseFloat(a, 64); err != nil || v < 0 {
			c.errorf("%s: activationTargetQueryValue %q is not a count", where, a)
		}
	}
}

// countQueries finds each `SELECT count(*) FROM planner_turns WHERE ...` of
// a normalized query, up to a closing parenthesis, a semicolon or the end.
var countQueries = regexp.MustCompile(`select count\(\*\) from planner_turns where ([^();]+)`)

// sqlComment is a -- comment, to the end of its line.
var sqlComment = regexp.MustCompile(`--[^\n]*`)

// normalizeSQL lowercases s and collapses its whitespace.
func normalizeSQL(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(s)), " ")
}

// conjuncts splits a normalized predicate on AND, sorted.
func conjuncts(pred string) []string {
	var out []string
	for _, p := range strings.Split(normalizeSQL(pred), " and ") {
		out = append(out, strings.TrimSpace(p))
	}
	slices.Sort(out)
	return out
}

// indexPredicate is the WHERE of the last `CREATE INDEX name ... WHERE ...;`
// in the Up sections of the product's migrations, normalized.
func indexPredicate(name string) (string, error) {
	files, err := filepath.Glob(filepath.Join("..", "..", "store", "migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no migrations under ../../store/migrations: %v", err)
	}
	slices.Sort(files)
	re := regexp.MustCompile(`create index ` + regexp.QuoteMeta(name) + ` on [^;]* where ([^;]+);`)
	pred := ""
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		up = sqlComment.ReplaceAllString(up, "")
		for _, m := range re.FindAllStringSubmatch(normalizeSQL(up), -1) {
			pred = m[1]
		}
	}
	if pred == "" {
		return "", fmt.Errorf("no partial index %s in ../../store/migrations", name)
	}
	return pred, nil
}

// scalerEnvNames are the container variables the ScaledObjects read.
func (c *checker) scalerEnvNames() []string {
	var names []string
	for _, so := range c.m.scaledObjects {
		for _, t := range so.Spec.Triggers {
			for k, v := range t.Metadata {
				if strings.HasSuffix(k, "FromEnv") {
					names = append(names, v)
				}
			}
		}
	}
	return names
}
