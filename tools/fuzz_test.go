package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// FuzzTools calls every tool (and an unknown one) with arbitrary input, as
// an engineer or, for idx ≥ 128, a viewer. A call never panics and never
// fails internally: it always gives JSON, either a result or an error result
// with a message. The plain test run executes the seeds.
func FuzzTools(f *testing.F) {
	fx := newFixture(f)
	names := append(slices.Clone(twelve), "apply_changeset")
	entry := fx.entry.ID
	seeds := map[string][]string{
		"list_items": {`{}`, `{"kind":"ticket","state":"ready","epic":"WEB-2","milestone":"web-1"}`,
			`{"kind":"epic","state":"backlog"}`, `{"state":"open"}`, `{"kind":1}`, `{"sort":"x"}`},
		"get_item":      {`{"key":"WEB-3"}`, `{"key":"GLX-1"}`, `{"key":"WEB-999999999999999999"}`, `{"key":""}`, `{}`},
		"list_runnable": {`{}`, `{"x":1}`, `[]`, ``},
		"search_project": {`{"query":"login"}`, `{"query":"WEB-3","kind":"item"}`, `{"query":"estimation","kind":"skill"}`,
			`{"query":"\"unterminated & | ! (:*"}`, `{"query":" "}`, `{"query":"` + strings.Repeat("a", 501) + `"}`},
		"list_changesets": {`{}`, `{"status":"proposed"}`, `{"status":"maybe"}`},
		"propose_changeset": {
			`{"title":"Add 2FA","summary":"why","operations":[{"kind":"create_item","ref":"totp","create":{"kind":"ticket","title":"TOTP","epic":"WEB-2","acceptance_criteria":["a"]}},{"kind":"update_item","update":{"item":"WEB-4","version":2,"milestone":""}},{"kind":"add_dependency","dependency":{"from":"WEB-3","to":"$totp","type":"blocks"}}]}`,
			`{"title":"t","operations":[{"kind":"create_item","create":{"kind":"ticket","title":"t","policy":{"merge_mode":"manual"}}}]}`,
			`{"title":"t","operations":[{"kind":"add_dependency","dependency":{"from":"WEB-4","to":"WEB-3","type":"blocks"}}]}`,
			`{"title":"t","operations":[{"kind":"update_item","update":{"item":"$x","title":"t"}}]}`,
			`{"title":"t","operations":[{"kind":"update_item","update":{"item":"WEB-1","type":"bug"}}]}`,
			`{"title":"","operations":[]}`,
		},
		"list_skills":      {`{}`, `{"all":true}`},
		"read_skill":       {`{"name":"planner"}`, `{"name":"unpublished"}`, `{"name":"nope"}`, `{"name":"A"}`},
		"search_knowledge": {`{"query":"cookies"}`, `{"query":"cookies","kind":"decision","limit":50}`, `{"query":"x","limit":0}`},
		"get_knowledge":    {fmt.Sprintf(`{"id":%q}`, entry), `{"id":"00000000-0000-0000-0000-000000000000"}`, `{"id":"x"}`},
		"create_knowledge": {`{"kind":"note","title":"t","body":"b","items":["WEB-3"]}`, `{"kind":"note","title":"t","body":"b\u0000"}`,
			`{"kind":"note","title":" ","body":""}`, `{"kind":"note","title":"t","body":"b","items":["GLX-1"]}`},
		"update_knowledge": {fmt.Sprintf(`{"id":%q,"version":1,"title":"new"}`, entry), fmt.Sprintf(`{"id":%q,"version":99,"body":""}`, entry),
			fmt.Sprintf(`{"id":%q,"version":1}`, entry), fmt.Sprintf(`{"id":%q,"version":1.5,"kind":"debt"}`, entry)},
		"apply_changeset": {`{"id":"x","operations":[0]}`},
	}
	for i, name := range names {
		for _, in := range seeds[name] {
			f.Add(uint8(i), []byte(in))
			f.Add(uint8(i+128), []byte(in))
		}
		f.Add(uint8(i), []byte(`not json`))
		f.Add(uint8(i), []byte(`{"a":{"b":[null,true,1e999]}}`))
	}
	f.Fuzz(func(t *testing.T, idx uint8, input []byte) {
		name := names[int(idx%128)%len(names)]
		who := fx.engineer
		if idx >= 128 {
			who = fx.viewer
		}
		logged := len(fx.log.messages())
		res := fx.reg.Call(context.Background(), fx.env(who), name, json.RawMessage(input))
		var out map[string]any
		if err := json.Unmarshal([]byte(res.Text), &out); err != nil {
			t.Fatalf("%s(%q): result is not a JSON object: %q", name, input, res.Text)
		}
		if res.IsError {
			if msg, _ := out["error"].(string); msg == "" {
				t.Fatalf("%s(%q): error result without a message: %s", name, input, res.Text)
			}
		} else if name == "apply_changeset" {
			t.Fatalf("an unknown tool answered: %s", res.Text)
		}
		for _, m := range fx.log.messages()[logged:] {
			if strings.HasPrefix(m, "tool panicked") || strings.HasPrefix(m, "tool failed") {
				t.Fatalf("%s(%q): %s", name, input, m)
			}
		}
	})
}
