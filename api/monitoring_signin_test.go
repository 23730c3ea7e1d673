package api_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// browserAccept is what chromium sends when it navigates to a page.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"

// dashboardVisit sends a request as a browser (accept) would, following
// no redirect; form, when not nil, is posted as the sign-in form.
func dashboardVisit(t *testing.T, e *env, method, path, accept, cookie string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, "http://"+e.srv.Addr()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(raw)
}

// TestMonitoringSignInPage: a browser refused by the dashboard gets a page
// saying why, with a form to sign in again that posts the token to the
// same page; clients of JSON, and the dashboard's own api, keep JSON.
func TestMonitoringSignInPage(t *testing.T) {
	t.Parallel()
	e := newMonitoringEnv(t)
	form := func(token string) url.Values { return url.Values{"token": {token}} }
	tests := []struct {
		name     string
		method   string
		path     string
		accept   string
		cookie   string
		form     url.Values
		status   int
		page     string // a sign-in page saying this; "" for JSON
		code     string // the JSON error
		location string // a redirect's, with the session cookie set
	}{
		{"a bad token from a browser", "GET", "/monitoring/?token=blt_nope&tab=x", browserAccept, "", nil, 401,
			"The token was not accepted: invalid token: malformed: an API token is blt_ and 43 characters, got 4. Check it and try again.", "", ""},
		{"a bad token from an API client", "GET", "/monitoring/?token=blt_nope", "application/json", "", nil, 401, "", "unauthenticated", ""},
		{"a bad token without Accept", "GET", "/monitoring/?token=blt_nope", "", "", nil, 401, "", "unauthenticated", ""},
		{"no token from a browser", "GET", "/monitoring/queues/default", browserAccept, "", nil, 401, "Sign in with an API token.", "", ""},
		{"a session that ended", "GET", "/monitoring/", browserAccept, "ballet_token=blt_" + strings.Repeat("A", 43), nil, 401,
			"Your dashboard session has ended (invalid, expired or revoked token). Sign in again.", "", ""},
		{"a token of another scope", "GET", "/monitoring/?token=" + e.tokens["admin"], browserAccept, "", nil, 403,
			"You cannot open the queue dashboard: the queue dashboard is for roles bound at platform scope", "", ""},
		{"the dashboard's api from a browser", "GET", "/monitoring/api/queues", browserAccept, "", nil, 401, "", "unauthenticated", ""},
		{"the form with a bad token", "POST", "/monitoring/queues/default?tab=retry", browserAccept, "", form("blt_nope"), 401,
			"The token was not accepted", "", ""},
		{"the form with a good token", "POST", "/monitoring/queues/default?tab=retry", browserAccept, "", form(e.tokens["platform"]), 303,
			"", "", "/monitoring/queues/default?tab=retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := dashboardVisit(t, e, tt.method, tt.path, tt.accept, tt.cookie, tt.form)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %.300s", res.StatusCode, tt.status, body)
			}
			set := res.Header.Get("Set-Cookie")
			if tt.location != "" {
				if res.Header.Get("Location") != tt.location || !strings.HasPrefix(set, "ballet_token=blt_") {
					t.Fatalf("Location %q, Set-Cookie %q", res.Header.Get("Location"), set)
				}
				return
			}
			if set != "" {
				t.Errorf("a refusal set a cookie: %q", set)
			}
			if tt.page == "" {
				var reply struct{ Error, Message string }
				if err := json.Unmarshal([]byte(body), &reply); err != nil || reply.Error != tt.code || reply.Message == "" {
					t.Fatalf("body %q, want the JSON error %s", body, tt.code)
				}
				return
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Fatalf("Content-Type %q, want text/html", ct)
			}
			if !strings.Contains(body, `role="alert">`+tt.page) {
				t.Errorf("page says %q, want %q", regexp.MustCompile(`role="alert">[^<]*`).FindString(body), tt.page)
			}
			// A form to try again: the token posted to the same page, its
			// other parameters kept, the token given never written back.
			action := regexp.MustCompile(`<form method="post" action="([^"]*)">`).FindStringSubmatch(body)
			want := strings.Split(tt.path, "?")[0]
			if q := strings.TrimPrefix(strings.TrimPrefix(tt.path, want), "?"); q != "" {
				v, _ := url.ParseQuery(q)
				v.Del("token")
				if enc := v.Encode(); enc != "" {
					want += "?" + enc
				}
			}
			if action == nil || action[1] != want || !strings.Contains(body, `<input id="token" name="token" type="password"`) {
				t.Errorf("no form posting the token to %s: %s", want, body)
			}
			if strings.Contains(body, "blt_nope") || strings.Contains(body, e.tokens["admin"]) {
				t.Errorf("the page shows the token given")
			}
			csp := res.Header.Get("Content-Security-Policy")
			if !strings.Contains(csp, "form-action 'self'") || strings.Contains(body, "<script") {
				t.Errorf("CSP %q; the page must run no script", csp)
			}
		})
	}
}

// TestMonitoringReadOnlyForPlatformViewers: a role bound at platform scope
// other than platform-admin opens the dashboard read-only (asynqmon hides
// its buttons, and ballet refuses their requests); a platform admin gets the
// buttons. Both pages run under the CSP.
func TestMonitoringReadOnlyForPlatformViewers(t *testing.T) {
	t.Parallel()
	e := newMonitoringEnv(t)
	e.tokens["watcher"] = platformViewer(t, e)
	tests := []struct {
		who      string
		readOnly string
	}{
		{"watcher", "true"},
		{"platform", "false"},
	}
	for _, tt := range tests {
		t.Run(tt.who, func(t *testing.T) {
			res, body := browserGet(t, e, "/monitoring/", "ballet_token="+e.tokens[tt.who])
			if res.StatusCode != 200 || !strings.Contains(body, `window.FLAG_READ_ONLY="`+tt.readOnly+`"`) {
				t.Fatalf("%d, want the page with FLAG_READ_ONLY %s: %.400s", res.StatusCode, tt.readOnly, body)
			}
			csp := res.Header.Get("Content-Security-Policy")
			for _, m := range regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(body, -1) {
				sum := sha256.Sum256([]byte(m[1]))
				if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
					t.Errorf("inline script %.60q not allowed by the CSP", m[1])
				}
			}
			e.do("GET", "/monitoring/api/queues", tt.who, nil).expect(t, 200)
		})
	}
	r := e.do("POST", "/monitoring/api/queues/default:pause", "watcher", nil).expect(t, 403)
	if r.message() != "the queue dashboard is read-only for you: its buttons are for platform admins" {
		t.Errorf("message %q", r.message())
	}
}
