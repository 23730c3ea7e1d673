package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/api"
)

const v1Prefix = "/api/v1"

// v1Routes lists the routes the api registers under /api/v1 as
// "METHOD /path" in OpenAPI form ({x} for Fiber's :x), without the prefix,
// HEAD (Fiber's automatic twin of GET) and middleware.
func v1Routes(s *api.Server) []string {
	param := regexp.MustCompile(`:([A-Za-z0-9_]+)`)
	var out []string
	for _, r := range s.App().GetRoutes(true) {
		if r.Method == http.MethodHead || (r.Path != v1Prefix && !strings.HasPrefix(r.Path, v1Prefix+"/")) {
			continue
		}
		p := param.ReplaceAllString(strings.TrimPrefix(r.Path, v1Prefix), "{$1}")
		out = append(out, r.Method+" "+p)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// openAPIDoc is the part of the document the tests read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title   string `json:"title"`
		Version string `json:"version"`
	} `json:"info"`
	Servers  []struct{ URL string } `json:"servers"`
	Security []map[string][]string  `json:"security"`
	Paths    map[string]map[string]json.RawMessage
	Comps    struct {
		SecuritySchemes map[string]struct {
			Type   string `json:"type"`
			Scheme string `json:"scheme"`
		} `json:"securitySchemes"`
		Parameters map[string]openAPIParam `json:"parameters"`
	} `json:"components"`
}

type openAPIParam struct {
	Ref      string `json:"$ref"`
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type openAPIOperation struct {
	OperationID string                     `json:"operationId"`
	Parameters  []openAPIParam             `json:"parameters"`
	Responses   map[string]json.RawMessage `json:"responses"`
	Security    *[]map[string][]string     `json:"security"`
	RequestBody json.RawMessage            `json:"requestBody"`
}

var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func parseOpenAPI(t *testing.T, raw []byte) (openAPIDoc, map[string]openAPIOperation) {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	ops := map[string]openAPIOperation{}
	for path, item := range doc.Paths {
		for method, rawOp := range item {
			if !slices.Contains(openAPIMethods, method) {
				if method != "parameters" && method != "summary" && method != "description" {
					t.Errorf("%s: unknown path item field %q", path, method)
				}
				continue
			}
			var op openAPIOperation
			if err := json.Unmarshal(rawOp, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return doc, ops
}

// TestOpenAPIDocument checks the document is a sound OpenAPI 3.1 document:
// version, info, bearer security, an id and responses on every operation,
// path parameters declared both ways, and every $ref resolving.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	raw := api.OpenAPI()
	doc, ops := parseOpenAPI(t, raw)
	if !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(doc.OpenAPI) {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	if doc.Info.Title == "" || doc.Info.Version == "" {
		t.Error("info.title and info.version are required")
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != v1Prefix {
		t.Errorf("servers %v, want [%s]", doc.Servers, v1Prefix)
	}
	if b, ok := doc.Comps.SecuritySchemes["bearer"]; !ok || b.Type != "http" || b.Scheme != "bearer" {
		t.Errorf("components.securitySchemes.bearer = %+v", b)
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearer"] == nil {
		t.Errorf("top-level security %v, want bearer", doc.Security)
	}
	ids := map[string]string{}
	templ := regexp.MustCompile(`\{([^}]+)\}`)
	for key, op := range ops {
		if op.OperationID == "" {
			t.Errorf("%s: no operationId", key)
		} else if prev, dup := ids[op.OperationID]; dup {
			t.Errorf("operationId %q on %s and %s", op.OperationID, prev, key)
		}
		ids[op.OperationID] = key
		if len(op.Responses) == 0 {
			t.Errorf("%s: no responses", key)
		}
		for code := range op.Responses {
			if !regexp.MustCompile(`^([1-5]\d\d|[1-5]XX|default)$`).MatchString(code) {
				t.Errorf("%s: response code %q", key, code)
			}
		}
		if op.Security == nil && !hasResponse(op, "401") {
			t.Errorf("%s: authenticated but no 401 response", key)
		}
		// Path parameters: every {x} declared, every declared one in the path.
		var declared []string
		for _, p := range op.Parameters {
			if p.Ref != "" {
				name := strings.TrimPrefix(p.Ref, "#/components/parameters/")
				c, ok := doc.Comps.Parameters[name]
				if !ok {
					t.Errorf("%s: parameter %s does not resolve", key, p.Ref)
					continue
				}
				p = c
			}
			if p.In == "path" {
				if !p.Required {
					t.Errorf("%s: path parameter %s must be required", key, p.Name)
				}
				declared = append(declared, p.Name)
			}
		}
		var inPath []string
		for _, m := range templ.FindAllStringSubmatch(key, -1) {
			inPath = append(inPath, m[1])
		}
		slices.Sort(declared)
		slices.Sort(inPath)
		if !slices.Equal(declared, inPath) {
			t.Errorf("%s: path parameters declared %v, in the path %v", key, declared, inPath)
		}
	}
	// Every $ref resolves within the document.
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	walkRefs(tree, func(ref string) {
		if !strings.HasPrefix(ref, "#/") {
			t.Errorf("external $ref %q", ref)
			return
		}
		var node any = tree
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, ok := node.(map[string]any)
			if !ok {
				node = nil
				break
			}
			node = m[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]
		}
		if node == nil {
			t.Errorf("$ref %q does not resolve", ref)
		}
	})
}

func hasResponse(op openAPIOperation, code string) bool { _, ok := op.Responses[code]; return ok }

func walkRefs(n any, f func(string)) {
	switch v := n.(type) {
	case map[string]any:
		for k, c := range v {
			if s, ok := c.(string); ok && k == "$ref" {
				f(s)
				continue
			}
			walkRefs(c, f)
		}
	case []any:
		for _, c := range v {
			walkRefs(c, f)
		}
	}
}

// TestOpenAPIMatchesRoutes checks the document and the routes the api
// registers (planner included) agree both ways.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.restart(t, withPlanner(), withSealer(testSealer(t)))
	_, ops := parseOpenAPI(t, api.OpenAPI())
	var documented []string
	for key := range ops {
		documented = append(documented, key)
	}
	slices.Sort(documented)
	registered := v1Routes(e.srv)
	for _, r := range registered {
		if _, ok := slices.BinarySearch(documented, r); !ok {
			t.Errorf("route %s is registered but not in api/openapi.json", r)
		}
	}
	for _, d := range documented {
		if _, ok := slices.BinarySearch(registered, d); !ok {
			t.Errorf("api/openapi.json documents %s, which is not registered", d)
		}
	}
	if len(registered) < 60 {
		t.Errorf("only %d routes found; is the planner registered?", len(registered))
	}
}

// TestOpenAPIServed checks GET /api/v1/openapi.json serves the embedded
// document, to anyone.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, who := range []string{"viewer", "outsider", ""} {
		t.Run(fmt.Sprintf("as %q", who), func(t *testing.T) {
			r := e.do("GET", api.OpenAPIPath, who, nil)
			r.expect(t, 200)
			if !bytes.Equal(r.Raw, api.OpenAPI()) {
				t.Error("served document differs from the embedded one")
			}
		})
	}
}
