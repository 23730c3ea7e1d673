package api_test

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestMonitoringOffline: the dashboard's index and everything it references
// (scripts, icons, the web app manifest and its icons) are served by the
// api itself and reference no other host, so the dashboard renders the same
// without the internet (no Google Fonts) and under its CSP.
func TestMonitoringOffline(t *testing.T) {
	t.Parallel()
	e := newMonitoringEnv(t)
	cookie := "ballet_token=" + e.tokens["platform"]
	base, err := url.Parse("http://" + e.srv.Addr() + "/monitoring/")
	if err != nil {
		t.Fatal(err)
	}
	// sameHost resolves a reference of the page at from; it fails the test
	// when it names another host.
	sameHost := func(t *testing.T, from *url.URL, ref string) *url.URL {
		t.Helper()
		u, err := from.Parse(ref)
		if err != nil {
			t.Fatalf("%s references %q: %v", from.Path, ref, err)
		}
		if u.Host != base.Host {
			t.Errorf("%s references %q on another host", from.Path, ref)
		}
		return u
	}
	attrRef := regexp.MustCompile(`(?i)\b(?:href|src)="([^"]+)"`)
	absolute := regexp.MustCompile(`(?i)\b(?:href|src)="(?:https?:)?//|url\(\s*['"]?(?:https?:)?//|@import\s+['"]?(?:https?:)?//`)
	fontHosts := regexp.MustCompile(`fonts\.googleapis\.com|fonts\.gstatic\.com|use\.typekit|cdn\.jsdelivr|unpkg\.com/|cdnjs\.`)

	for _, page := range []string{"/monitoring/", "/monitoring/queues/default"} {
		t.Run(page, func(t *testing.T) {
			res, body := browserGet(t, e, page, cookie)
			if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
				t.Fatalf("%s: %d %q", page, res.StatusCode, res.Header.Get("Content-Type"))
			}
			if m := absolute.FindString(body); m != "" || fontHosts.MatchString(body) {
				t.Fatalf("%s loads from another host (%q): %.600s", page, m, body)
			}
			refs := attrRef.FindAllStringSubmatch(body, -1)
			if len(refs) < 5 {
				t.Fatalf("%s references %d files; want its scripts, icons and manifest: %.600s", page, len(refs), body)
			}
			from, _ := base.Parse(page)
			for _, m := range refs {
				u := sameHost(t, from, m[1])
				res, asset := browserGet(t, e, u.RequestURI(), "")
				if res.StatusCode != 200 {
					t.Errorf("%s: %d", u.Path, res.StatusCode)
					continue
				}
				if fontHosts.MatchString(asset) || regexp.MustCompile(`url\(\s*['"]?https?://`).MatchString(asset) {
					t.Errorf("%s loads from another host", u.Path)
				}
				if !strings.HasSuffix(u.Path, "/manifest.json") {
					continue
				}
				var man struct {
					Icons []struct {
						Src string `json:"src"`
					} `json:"icons"`
				}
				if err := json.Unmarshal([]byte(asset), &man); err != nil || len(man.Icons) == 0 {
					t.Fatalf("manifest %q: %v", asset, err)
				}
				for _, icon := range man.Icons {
					iu := sameHost(t, u, icon.Src)
					if res, _ := browserGet(t, e, iu.RequestURI(), ""); res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/png" {
						t.Errorf("manifest icon %s: %d %q", iu.Path, res.StatusCode, res.Header.Get("Content-Type"))
					}
				}
			}
		})
	}
}
