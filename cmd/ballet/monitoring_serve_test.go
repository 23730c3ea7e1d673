package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/internal/logtest"
	"github.com/balletplanner/ballet/store/storetest"
)

// exportedFamilies are the metric families of a scrape, by name, with
// their type.
func exportedFamilies(body string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// exported reports whether a scrape with these families has series named
// name: a family, or a histogram's _bucket, _sum or _count.
func exported(families map[string]string, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if typ := families[base]; typ == "histogram" || typ == "summary" {
				return true
			}
		}
	}
	return false
}

// TestMonitoringAgainstServe: every metric the rules and the dashboard
// name is one a real `ballet serve` exports after a turn (or a recording
// rule of rules.yml); and a real Prometheus scraping that process with
// rules.yml loaded evaluates every rule without error and answers every
// dashboard query.
func TestMonitoringAgainstServe(t *testing.T) {
	t.Parallel()
	prometheus := monitoringTool(t, "prometheus")
	// With an embeddings model the worker runs (and exports) the embed queue.
	p, token, _ := startDemoServe(t, "demo", "BALLET_SEARCH_EMBEDDINGS_MODEL=fake-embed", "BALLET_SEARCH_EMBED_DELAY=100ms")
	c := client{t: t, base: "http://" + p.addr + "/api/v1", token: token}
	var sess struct{ ID string }
	if s := c.do("POST", "/projects/DEMO/planner/sessions", map[string]any{"title": "Monitoring"}, &sess); s != 201 {
		t.Fatalf("create session: %d", s)
	}
	if s := c.do("POST", "/planner/sessions/"+sess.ID+"/messages", map[string]any{"text": "What should we plan?"}, nil); s != 202 {
		t.Fatalf("send: %d", s)
	}
	storetest.WaitFor(t, "the turn counted as completed", func() bool {
		return p.metric(t, `ballet_planner_turns_total{outcome="completed"}`) == 1
	})
	// The dispatcher enqueues the turn's task after the send returns, so a
	// scrape before that found no planner queue in Redis, and the worker
	// keeps that lookup for 5s: wait for the queue depth too.
	var families map[string]string
	storetest.WaitFor(t, "an embed task counted and the planner queue depth", func() bool {
		families = exportedFamilies(p.scrape(t, ""))
		_, embed := families["ballet_search_embed_tasks_total"]
		_, depth := families["ballet_planner_queue_depth"]
		return embed && depth
	})

	rules := readRules(t)
	records := rules.records()
	checkNames := func(where, expr string) {
		names := promqlMetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: names no metric: %s", where, expr)
		}
		for _, n := range names {
			if !records[n] && !exported(families, n) {
				t.Errorf("%s: %s is neither a metric `ballet serve` exports nor a recording rule of rules.yml", where, n)
			}
		}
	}
	for name, expr := range rules.exprs() {
		checkNames("rule "+name, expr)
	}
	d, queries := readDashboard(t)
	for _, q := range queries {
		checkNames(fmt.Sprintf("panel %q", q.panel), q.expr)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		must(t, json.Unmarshal(v.Query, &q))
		metric, ok := strings.CutPrefix(q.Query, "label_values(")
		metric, _, _ = strings.Cut(metric, ",")
		if !ok || !exported(families, strings.TrimSpace(metric)) {
			t.Errorf("variable %s: query %q, want label_values(<an exported metric>, <label>)", v.Name, q.Query)
		}
	}

	// A real Prometheus scrapes the process every second with the rules.
	abs, err := filepath.Abs(filepath.Join(monitoringDir, "prometheus", "rules.yml"))
	must(t, err)
	dir := t.TempDir()
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: ballet
    static_configs: [{targets: [%q]}]
`, abs, p.metrics)
	must(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600))
	addr := freeAddr(t)
	cmd := exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	var log logtest.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	must(t, cmd.Start())
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
	})
	api := "http://" + addr + "/api/v1/"
	get := func(path string, into any) bool {
		res, err := http.Get(api + path)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(into) == nil
	}

	var targets struct {
		Data struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		return get("targets", &targets) && len(targets.Data.ActiveTargets) == 1 && targets.Data.ActiveTargets[0].Health == "up"
	}) {
		t.Fatalf("prometheus never scraped %s: targets %+v\n%s", p.metrics, targets, log.String())
	}

	type ruleState struct {
		Name      string `json:"name"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
	}
	var groups struct {
		Data struct {
			Groups []struct {
				Name  string      `json:"name"`
				Rules []ruleState `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	want := len(rules.exprs())
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		if !get("rules", &groups) {
			return false
		}
		n := 0
		for _, g := range groups.Data.Groups {
			for _, r := range g.Rules {
				if r.Health != "ok" || r.LastError != "" {
					return false
				}
				n++
			}
		}
		return n == want
	}) {
		t.Fatalf("rules not all evaluated ok (want %d): %+v\n%s", want, groups.Data.Groups, log.String())
	}

	type vector struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	for _, q := range queries {
		var r vector
		if !get("query?query="+url.QueryEscape(q.expr), &r) || r.Status != "success" {
			t.Errorf("panel %q: query %s: %s %s", q.panel, q.expr, r.Status, r.Error)
		}
	}
	// A healthy gateway's 5xx share is 0, not "No data": the turn's model
	// calls all answered 200, so no 5xx series exists.
	fivexx := ""
	for _, q := range queries {
		if q.panel == "Model calls failing (5xx share)" {
			fivexx = q.expr
		}
	}
	if fivexx == "" {
		t.Fatal(`no panel "Model calls failing (5xx share)"`)
	}
	var share struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if !storetest.Poll(storetest.WaitTimeout, func() bool {
		return get("query?query="+url.QueryEscape(fivexx), &share) && len(share.Data.Result) == 1 && share.Data.Result[0].Value[1] == "0"
	}) {
		t.Errorf("5xx share panel %s: %+v, want one sample of 0", fivexx, share.Data.Result)
	}
	// The series the alerts rest on are there from the start; serve's one
	// process counts as a worker for BalletPlannerNoDispatcher, and its
	// dispatcher leads.
	for expr, n := range map[string]int{
		"ballet:llm_budgets:max":                               3,
		"ballet:rpc_connections:ratio":                         1,
		`ballet:planner_queue_depth:max{state="pending"}`:      1,
		`ballet_planner_resumes_total{reason="lease_expired"}`: 1,
		`ballet_build_info{service=~"worker|serve"}`:           1,
		"ballet_planner_dispatcher_leader == 1":                1,
	} {
		var r vector
		if !storetest.Poll(storetest.WaitTimeout, func() bool {
			return get("query?query="+url.QueryEscape(expr), &r) && len(r.Data.Result) == n
		}) {
			t.Errorf("query %s: %d series, want %d: %+v", expr, len(r.Data.Result), n, r)
		}
	}
	p.stop(t)
}

// promqlMetricNames are the metric names an expression selects: its
// identifiers outside strings, label matchers, windows and grouping
// clauses that are neither functions nor keywords.
func promqlMetricNames(expr string) []string {
	for _, re := range []string{`"(?:[^"\\]|\\.)*"`, `'(?:[^'\\]|\\.)*'`, `\{[^}]*\}`, `\[[^\]]*\]`,
		`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`} {
		expr = regexp.MustCompile(re).ReplaceAllString(expr, " ")
	}
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
	seen := map[string]bool{}
	for _, loc := range regexp.MustCompile(`[a-zA-Z_:][\w:]*`).FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(expr[loc[0]-1:loc[0]], "0123456789.") {
			continue // 1e3, a number's exponent
		}
		if strings.HasPrefix(strings.TrimSpace(expr[loc[1]:]), "(") || keywords[strings.ToLower(name)] {
			continue // a function, or a keyword
		}
		seen[name] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestPromQLMetricNames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`sum by (state) (rate(a_total{x="b_c"}[5m]))`, []string{"a_total"}},
		{`histogram_quantile(0.95, sum by (le, provider) (rate(x_bucket[1m])))`, []string{"x_bucket"}},
		{"a / ignoring (outcome) group_left b:c:d", []string{"a", "b:c:d"}},
		{`x > 0 and on () sum(rate(y[10m])) == 0`, []string{"x", "y"}},
		{`topk(10, z) > 1e3`, []string{"z"}},
	} {
		if got := promqlMetricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("promqlMetricNames(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}
