package api

import (
	"net/http"
	"net/url"

	"github.com/gorilla/mux"
)

// dashboardVerb is what one of the dashboard's buttons does to tasks.
type dashboardVerb int

// The dashboard's buttons.
const (
	// verbCancel stops active tasks (asynq's CancelProcessing).
	verbCancel dashboardVerb = iota
	// verbDelete deletes pending, scheduled, retry or archived tasks.
	verbDelete
	// verbDeleteCompleted deletes what asynq keeps of completed tasks.
	verbDeleteCompleted
	// verbRun moves scheduled, retry or archived tasks to pending.
	verbRun
	// verbArchive moves pending, scheduled or retry tasks to archived.
	verbArchive
	// verbPause pauses or resumes a queue.
	verbPause
	// verbDeleteQueue deletes a queue.
	verbDeleteQueue
	// verbGroup is any action on a group's aggregating tasks.
	verbGroup
)

// dashboardScope is how many tasks a button acts on.
type dashboardScope int

// Scopes of the dashboard's buttons.
const (
	scopeOne   dashboardScope = iota // one task, by id
	scopeBatch                       // the tasks selected, by id in the body
	scopeAll                         // every task of the list
	scopeQueue                       // the queue itself
)

// dashboardAction is one of the dashboard api's mutating routes.
type dashboardAction struct {
	verb  dashboardVerb
	scope dashboardScope
	// name is the button as the dashboard labels it, for messages.
	name string
}

// dashboardRoutes are asynqmon v0.7.2's mutating routes (its handler.go),
// with the same templates so that a request is read exactly as asynqmon
// would read it; each maps to the action it is. GETs only read.
var dashboardRoutes, dashboardActions = newDashboardRoutes()

func newDashboardRoutes() (*mux.Router, map[*mux.Route]dashboardAction) {
	r := mux.NewRouter()
	actions := map[*mux.Route]dashboardAction{}
	// Each route has a handler, never called: without one, mux reports a
	// route after one of another method as a method mismatch.
	add := func(method, path string, a dashboardAction) {
		actions[r.Path(MonitoringPath+"/api"+path).Methods(method).Handler(http.NotFoundHandler())] = a
	}
	add("DELETE", "/queues/{qname}", dashboardAction{verbDeleteQueue, scopeQueue, "Delete queue"})
	add("POST", "/queues/{qname}:pause", dashboardAction{verbPause, scopeQueue, "Pause"})
	add("POST", "/queues/{qname}:resume", dashboardAction{verbPause, scopeQueue, "Resume"})
	add("POST", "/queues/{qname}/active_tasks/{task_id}:cancel", dashboardAction{verbCancel, scopeOne, "Cancel"})
	add("POST", "/queues/{qname}/active_tasks:cancel_all", dashboardAction{verbCancel, scopeAll, "Cancel all"})
	add("POST", "/queues/{qname}/active_tasks:batch_cancel", dashboardAction{verbCancel, scopeBatch, "Cancel"})
	for _, state := range []string{"pending", "scheduled", "retry", "archived", "completed"} {
		verb := verbDelete
		if state == "completed" {
			verb = verbDeleteCompleted
		}
		list := "/queues/{qname}/" + state + "_tasks"
		add("DELETE", list+"/{task_id}", dashboardAction{verb, scopeOne, "Delete"})
		add("DELETE", list+":delete_all", dashboardAction{verb, scopeAll, "Delete all"})
		add("POST", list+":batch_delete", dashboardAction{verb, scopeBatch, "Delete"})
	}
	for _, state := range []string{"scheduled", "retry", "archived"} {
		list := "/queues/{qname}/" + state + "_tasks"
		add("POST", list+"/{task_id}:run", dashboardAction{verbRun, scopeOne, "Run"})
		add("POST", list+":run_all", dashboardAction{verbRun, scopeAll, "Run all"})
		add("POST", list+":batch_run", dashboardAction{verbRun, scopeBatch, "Run"})
	}
	for _, state := range []string{"pending", "scheduled", "retry"} {
		list := "/queues/{qname}/" + state + "_tasks"
		add("POST", list+"/{task_id}:archive", dashboardAction{verbArchive, scopeOne, "Archive"})
		add("POST", list+":archive_all", dashboardAction{verbArchive, scopeAll, "Archive all"})
		add("POST", list+":batch_archive", dashboardAction{verbArchive, scopeBatch, "Archive"})
	}
	for _, method := range []string{"POST", "DELETE"} {
		add(method, "/queues/{qname}/groups/{gname}/{rest:.+}", dashboardAction{verbGroup, scopeAll, "grouped task action"})
	}
	return r, actions
}

// matchDashboardAction finds the action of a mutating request to the
// dashboard's api, and its route variables (qname, task_id); ok is false
// for a request that is none of them.
func matchDashboardAction(method, path string) (a dashboardAction, vars map[string]string, ok bool) {
	// asynqmon reads the decoded path, as net/http gives it.
	decoded, err := url.PathUnescape(path)
	if err != nil {
		return dashboardAction{}, nil, false
	}
	var m mux.RouteMatch
	if !dashboardRoutes.Match(&http.Request{Method: method, URL: &url.URL{Path: decoded}}, &m) || m.MatchErr != nil {
		return dashboardAction{}, nil, false
	}
	a, ok = dashboardActions[m.Route]
	return a, m.Vars, ok
}
