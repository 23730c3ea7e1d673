package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/balletplanner/ballet/store"
)

// restClient calls the api's REST routes as one token holder.
type restClient struct {
	base  string // e.g. http://127.0.0.1:8080
	token string
	http  *http.Client
}

func newRESTClient(base, token string) *restClient {
	return &restClient{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

// apiError is a refusal of the api: its code and message (SPEC §10).
type apiError struct {
	Status  int
	Code    string `json:"error"`
	Message string `json:"message"`
}

// Error says what the api refused; a refused token says how to pass
// another.
func (e *apiError) Error() string {
	if e.Code == string(store.CodeUnauthenticated) {
		return fmt.Sprintf("the api refused the token (unauthenticated: %s); pass a valid --token or $BALLET_TOKEN", e.Message)
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// do sends one request to /api/v1+path and decodes a 2xx answer into out.
// Its errors do not start with "chat:": each caller names its operation.
func (c *restClient) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/api/v1"+path, r)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the api at %s (is it running? `make run` starts one): %w", c.base, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if res.StatusCode/100 != 2 {
		ae := &apiError{Status: res.StatusCode}
		if json.Unmarshal(raw, ae) != nil || ae.Code == "" {
			ae.Code, ae.Message = "unknown", strings.TrimSpace(string(raw))
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// projects lists every project the token sees, organization by organization.
func (c *restClient) projects(ctx context.Context) ([]store.Project, error) {
	var orgs struct{ Items []store.Organization }
	if err := c.do(ctx, http.MethodGet, "/organizations", nil, &orgs); err != nil {
		return nil, fmt.Errorf("chat: list organizations: %w", err)
	}
	var all []store.Project
	for _, o := range orgs.Items {
		var ps struct{ Items []store.Project }
		if err := c.do(ctx, http.MethodGet, "/organizations/"+url.PathEscape(o.Key)+"/projects", nil, &ps); err != nil {
			return nil, fmt.Errorf("chat: list projects of %s: %w", o.Key, err)
		}
		all = append(all, ps.Items...)
	}
	return all, nil
}

// project loads one project by key.
func (c *restClient) project(ctx context.Context, key string) (store.Project, error) {
	var p store.Project
	if err := c.do(ctx, http.MethodGet, "/projects/"+url.PathEscape(key), nil, &p); err != nil {
		return store.Project{}, fmt.Errorf("chat: project %s: %w", key, err)
	}
	return p, nil
}

// sessions lists a project's planner sessions, most recently active first.
func (c *restClient) sessions(ctx context.Context, project string) ([]store.Session, error) {
	var list struct{ Items []store.Session }
	if err := c.do(ctx, http.MethodGet, "/projects/"+url.PathEscape(project)+"/planner/sessions", nil, &list); err != nil {
		return nil, fmt.Errorf("chat: list sessions of %s: %w", project, err)
	}
	return list.Items, nil
}

// createSession starts a planner session in the project.
func (c *restClient) createSession(ctx context.Context, project, title string) (store.Session, error) {
	var s store.Session
	err := c.do(ctx, http.MethodPost, "/projects/"+url.PathEscape(project)+"/planner/sessions",
		map[string]string{"title": title}, &s)
	if err != nil {
		return store.Session{}, fmt.Errorf("chat: create a session in %s: %w", project, err)
	}
	return s, nil
}

// session loads a session with its messages.
func (c *restClient) session(ctx context.Context, id string) (store.Session, error) {
	var s store.Session
	if err := c.do(ctx, http.MethodGet, "/planner/sessions/"+url.PathEscape(id), nil, &s); err != nil {
		return store.Session{}, fmt.Errorf("chat: session %s: %w", id, err)
	}
	return s, nil
}

// humanTexts maps each turn of the session to the text the human sent,
// which the outputs do not repeat.
func humanTexts(s store.Session) map[string]string {
	m := map[string]string{}
	for _, msg := range s.Messages {
		if msg.Role != "user" || msg.Turn == "" {
			continue
		}
		if _, seen := m[msg.Turn]; seen {
			continue
		}
		var parts []string
		for _, b := range msg.Content {
			if b.Type == store.BlockText {
				parts = append(parts, b.Text)
			}
		}
		if len(parts) > 0 {
			m[msg.Turn] = strings.Join(parts, "\n")
		}
	}
	return m
}
