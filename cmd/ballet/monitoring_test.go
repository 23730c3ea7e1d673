package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// monitoringDir holds the Prometheus rules and the Grafana dashboard.
const monitoringDir = "../../deploy/monitoring"

// monitoringTool is the path of promtool or prometheus, from Debian's
// prometheus package, which `make test` installs; the test fails without it.
func monitoringTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/bin/" + name; fileExists(p) {
		return p
	}
	t.Fatalf("%s is not installed: run `deploy/dev/services.sh promtool` (Debian's prometheus package; `make test` does)", name)
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// runTool runs a tool and fails t with its output when it exits non-zero.
func runTool(t *testing.T, dir, tool string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ruleFile is rules.yml as Prometheus reads it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "prometheus", "rules.yml"))
	must(t, err)
	var f ruleFile
	must(t, yaml.Unmarshal(b, &f))
	if len(f.Groups) == 0 {
		t.Fatal("rules.yml has no groups")
	}
	return f
}

// records are the recording rules' names.
func (f ruleFile) records() map[string]bool {
	out := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = true
			}
		}
	}
	return out
}

// exprs are every rule's expression, by the rule's name.
func (f ruleFile) exprs() map[string]string {
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Record+r.Alert] = r.Expr
		}
	}
	return out
}

// runbookBase is how every alert's runbook_url begins: the page the
// external label ballet_runbooks_url names, else docs/operations.md on
// GitHub, always absolute (Alertmanager and Grafana cannot open a relative
// link); the alert's section follows.
const runbookBase = "{{ with $externalLabels.ballet_runbooks_url }}{{ . }}{{ else }}" +
	"https://github.com/balletplanner/ballet/blob/main/docs/operations.md{{ end }}#"

// TestMonitoringRules: rules.yml passes `promtool check rules` and its unit
// tests (`promtool test rules`); every alert has a severity, a summary, a
// description and an absolute runbook_url naming a section of
// docs/operations.md, and rules_test.yml tests every alert both firing and
// not, and the runbook_url of an external label; recording rules follow
// ballet:<metric>:<operations>.
func TestMonitoringRules(t *testing.T) {
	t.Parallel()
	promtool := monitoringTool(t, "promtool")
	dir := filepath.Join(monitoringDir, "prometheus")
	runTool(t, dir, promtool, "check", "rules", "rules.yml")
	if out := runTool(t, dir, promtool, "test", "rules", "rules_test.yml"); !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %s", out)
	}

	ops, err := os.ReadFile("../../docs/operations.md")
	must(t, err)
	anchors := markdownAnchors(string(ops))
	tests, err := os.ReadFile(filepath.Join(dir, "rules_test.yml"))
	must(t, err)
	var unit struct {
		Tests []struct {
			ExternalLabels map[string]string `yaml:"external_labels"`
			AlertRuleTest  []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
			PromQLExprTest []struct {
				Expr string `yaml:"expr"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	must(t, yaml.Unmarshal(tests, &unit))
	labelled := false
	for _, tc := range unit.Tests {
		labelled = labelled || tc.ExternalLabels["ballet_runbooks_url"] != ""
	}
	if !labelled {
		t.Error("rules_test.yml has no case with the external label ballet_runbooks_url")
	}
	fires, quiet, evaluated := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tc := range unit.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
		for _, e := range tc.PromQLExprTest {
			evaluated[strings.TrimSpace(e.Expr)] = true
		}
	}
	record := regexp.MustCompile(`^ballet:[a-z0-9_]+:[a-z0-9_]+$`)
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				if !record.MatchString(r.Record) {
					t.Errorf("recording rule %s: want the name ballet:<metric>:<operations>", r.Record)
				}
				if !evaluated[r.Record] {
					t.Errorf("recording rule %s: no promql_expr_test in rules_test.yml", r.Record)
				}
				continue
			}
			alerts++
			if !slices.Contains([]string{"info", "warning", "critical"}, r.Labels["severity"]) {
				t.Errorf("alert %s: severity %q, want info, warning or critical", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
			if !ok || anchor != strings.ToLower(r.Alert) || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q, want %s%s, %s being a heading of docs/operations.md",
					r.Alert, r.Annotations["runbook_url"], runbookBase, strings.ToLower(r.Alert), strings.ToLower(r.Alert))
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: rules_test.yml needs a case where it fires (%v) and one where it does not (%v)",
					r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	if alerts == 0 {
		t.Fatal("rules.yml has no alerts")
	}
}

// markdownAnchors are the anchors of a markdown document's headings, as
// GitHub makes them.
func markdownAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return out
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboardPanel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource *datasourceRef   `json:"datasource"`
	Panels     []dashboardPanel `json:"panels"` // a collapsed row's
	Targets    []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboardQuery is one panel target's expression, as written and with
// Grafana's variables replaced by values Prometheus accepts.
type dashboardQuery struct {
	panel, raw, expr string
}

// grafanaVariables are the values the tests give the dashboard's variables.
var grafanaVariables = map[string]string{
	"__rate_interval": "1m", "__interval": "30s", "__range": "1h", "datasource": "prometheus", "queue": ".*",
}

var grafanaVariable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// readDashboard parses grafana/ballet.json and returns it and every
// panel's queries.
func readDashboard(t *testing.T) (dashboard, []dashboardQuery) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "grafana", "ballet.json"))
	must(t, err)
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	must(t, dec.Decode(&d))
	var queries []dashboardQuery
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				expr := grafanaVariable.ReplaceAllStringFunc(tg.Expr, func(v string) string {
					m := grafanaVariable.FindStringSubmatch(v)
					name := m[1] + m[2]
					val, ok := grafanaVariables[name]
					if !ok {
						t.Errorf("panel %q: variable $%s has no test value", p.Title, name)
					}
					return val
				})
				queries = append(queries, dashboardQuery{panel: p.Title, raw: tg.Expr, expr: expr})
			}
		}
	}
	walk(d.Panels)
	return d, queries
}

// TestMonitoringDashboard: the dashboard reads every query from the
// ${datasource} variable, windows rates with $__rate_interval, has unique
// panel ids, and every query parses (`promtool check rules` on the queries
// as recording rules).
func TestMonitoringDashboard(t *testing.T) {
	t.Parallel()
	promtool := monitoringTool(t, "promtool")
	d, queries := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: want both", d.Title, d.UID)
	}
	hasDatasource := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasDatasource = true
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %+v, want uid ${datasource}", v.Name, v.Datasource)
		}
	}
	if !hasDatasource {
		t.Error("no datasource variable of type datasource for prometheus")
	}
	ids := map[int]string{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
			}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q query %s: datasource %+v, want uid ${datasource}", p.Title, tg.RefID, tg.Datasource)
				}
			}
		}
	}
	walk(d.Panels)
	window := regexp.MustCompile(`\[([^\]]*)\]`)
	for _, q := range queries {
		for _, m := range window.FindAllStringSubmatch(q.raw, -1) {
			if m[1] != "$__rate_interval" {
				t.Errorf("panel %q: window [%s] in %s, want [$__rate_interval]", q.panel, m[1], q.raw)
			}
		}
	}
	if len(queries) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	rules := "groups:\n  - name: dashboard\n    rules:\n"
	for i, q := range queries {
		expr, err := json.Marshal(q.expr)
		must(t, err)
		rules += fmt.Sprintf("      - record: dashboard:query_%d:panel\n        expr: %s\n", i, expr)
	}
	file := filepath.Join(t.TempDir(), "dashboard.yml")
	must(t, os.WriteFile(file, []byte(rules), 0o600))
	runTool(t, "", promtool, "check", "rules", file)
}
