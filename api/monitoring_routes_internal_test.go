package api

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDashboardKnowsEveryAsynqmonAction reads the routes of the asynqmon in
// go.mod from its source: each one that is not a GET is one of
// dashboardRoutes, so no button of the dashboard reaches asynq unchecked
// (an unknown one would be refused, and its button broken).
func TestDashboardKnowsEveryAsynqmonAction(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/hibiken/asynqmon").Output()
	if err != nil {
		t.Fatalf("go list asynqmon: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "handler.go"))
	if err != nil {
		t.Fatal(err)
	}
	route := regexp.MustCompile(`api\.HandleFunc\("([^"]+)",[^\n]*\.Methods\("([A-Z]+)"\)`)
	vars := strings.NewReplacer("{qname}", "planner", "{task_id}", "0f8fad5b-d9cb-469f-a165-70867728950e:resume:1", "{gname}", "g")
	actions := 0
	for _, m := range route.FindAllStringSubmatch(string(src), -1) {
		path := MonitoringPath + "/api" + vars.Replace(m[1])
		a, got, ok := matchDashboardAction(m[2], path)
		if m[2] == "GET" {
			if ok {
				t.Errorf("GET %s is taken for an action", m[1])
			}
			continue
		}
		actions++
		switch {
		case !ok:
			t.Errorf("%s %s is not one of dashboardRoutes", m[2], m[1])
		case got["qname"] != "planner":
			t.Errorf("%s %s: queue %q", m[2], m[1], got["qname"])
		case strings.Contains(m[1], "{task_id}") && a.verb != verbGroup && got["task_id"] != "0f8fad5b-d9cb-469f-a165-70867728950e:resume:1":
			t.Errorf("%s %s: task %q", m[2], m[1], got["task_id"])
		}
	}
	if actions < 40 {
		t.Fatalf("found %d actions in asynqmon's handler.go; its routes are no longer read", actions)
	}
}

func TestDashboardPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		method  string
		path    string
		kind    queueKind
		outcome dashboardOutcome
	}{
		{"cancel a turn", "POST", "/queues/q/active_tasks/t:cancel", queuePlanner, actOnTurns},
		{"cancel a selection of turns", "POST", "/queues/q/active_tasks:batch_cancel", queuePlanner, actOnTurns},
		{"cancel every turn", "POST", "/queues/q/active_tasks:cancel_all", queuePlanner, refuse},
		{"delete a pending turn", "DELETE", "/queues/q/pending_tasks/t", queuePlanner, actOnTurns},
		{"delete a retrying turn", "DELETE", "/queues/q/retry_tasks/t", queuePlanner, actOnTurns},
		{"delete an archived turn", "DELETE", "/queues/q/archived_tasks/t", queuePlanner, actOnTurns},
		{"delete a selection of scheduled turns", "POST", "/queues/q/scheduled_tasks:batch_delete", queuePlanner, actOnTurns},
		{"delete every retrying turn", "DELETE", "/queues/q/retry_tasks:delete_all", queuePlanner, refuse},
		{"delete a completed turn's record", "DELETE", "/queues/q/completed_tasks/t", queuePlanner, passAsynq},
		{"delete every completed record", "DELETE", "/queues/q/completed_tasks:delete_all", queuePlanner, passAsynq},
		{"run a retrying turn now", "POST", "/queues/q/retry_tasks/t:run", queuePlanner, passAsynq},
		{"run every archived turn", "POST", "/queues/q/archived_tasks:run_all", queuePlanner, passAsynq},
		{"archive a turn", "POST", "/queues/q/pending_tasks/t:archive", queuePlanner, refuse},
		{"pause", "POST", "/queues/q:pause", queuePlanner, passAsynq},
		{"resume", "POST", "/queues/q:resume", queuePlanner, passAsynq},
		{"delete the planner queue", "DELETE", "/queues/q", queuePlanner, refuse},
		{"grouped", "DELETE", "/queues/q/groups/g/aggregating_tasks/t", queuePlanner, refuse},
		{"cancel an embed run", "POST", "/queues/q/active_tasks/t:cancel", queueEmbed, refuse},
		{"delete an embed run", "DELETE", "/queues/q/scheduled_tasks/t", queueEmbed, refuse},
		{"archive an embed run", "POST", "/queues/q/retry_tasks/t:archive", queueEmbed, refuse},
		{"run an embed run now", "POST", "/queues/q/scheduled_tasks/t:run", queueEmbed, passAsynq},
		{"delete an embed record", "POST", "/queues/q/completed_tasks:batch_delete", queueEmbed, passAsynq},
		{"pause embedding", "POST", "/queues/q:pause", queueEmbed, passAsynq},
		{"delete the embed queue", "DELETE", "/queues/q", queueEmbed, refuse},
		{"cancel a retention run", "POST", "/queues/q/active_tasks/t:cancel", queueRetention, passAsynq},
		{"delete a retention run", "DELETE", "/queues/q/pending_tasks/t", queueRetention, passAsynq},
		{"archive a retention run", "POST", "/queues/q/pending_tasks/t:archive", queueRetention, passAsynq},
		{"delete the retention queue", "DELETE", "/queues/q", queueRetention, refuse},
		{"another deployment's pause", "POST", "/queues/q:pause", queueForeign, refuse},
		{"another deployment's record", "DELETE", "/queues/q/completed_tasks/t", queueForeign, refuse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _, ok := matchDashboardAction(tt.method, MonitoringPath+"/api"+tt.path)
			if !ok {
				t.Fatalf("%s %s is no action", tt.method, tt.path)
			}
			got, reason := dashboardPolicy(tt.kind, a)
			if got != tt.outcome {
				t.Fatalf("outcome %d, want %d (reason %q)", got, tt.outcome, reason)
			}
			if (got == refuse) != (reason != "") {
				t.Fatalf("outcome %d with reason %q", got, reason)
			}
		})
	}
}
