package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
)

// TestDemoPlaysAPlanner runs the planner loop against the demo fake as the
// fallback upstream (gateway.fake = "demo"):
// the tools come in the order of a believable planner, then a summary.
func TestDemoPlaysAPlanner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withProvider(""), withFallback(fakellm.Demo()))
	req := llm.MessageRequest{Model: "claude-sonnet-5-5", MaxTokens: 8192,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: llm.Content{{Type: llm.BlockText, Text: "We need password reset by email."}}}}}
	var tools []string
	var proposal json.RawMessage
	var final string
	for round := 0; round < 8; round++ {
		s, err := e.client.Stream(context.Background(), e.principal(), req)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := s.Collect(nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, Content: msg.Content})
		var results llm.Content
		for _, b := range msg.Content {
			if b.Type == llm.BlockToolUse {
				tools = append(tools, b.Name)
				if b.Name == "propose_changeset" {
					proposal = b.Input
				}
				results = append(results, llm.ContentBlock{Type: llm.BlockToolResult, ToolUseID: b.ID, Content: llm.Content{{Type: llm.BlockText, Text: `{"ok":true}`}}})
			}
		}
		if msg.StopReason != llm.StopToolUse {
			final = msg.Content.Text()
			break
		}
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleUser, Content: results})
	}
	if strings.Join(tools, ",") != "list_runnable,search_project,read_skill,propose_changeset" {
		t.Fatalf("tools = %v", tools)
	}
	var cs struct {
		Title      string `json:"title"`
		Summary    string `json:"summary"`
		Operations []struct {
			Kind       string          `json:"kind"`
			Ref        string          `json:"ref"`
			Create     map[string]any  `json:"create"`
			Dependency json.RawMessage `json:"dependency"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(proposal, &cs); err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, op := range cs.Operations {
		kinds = append(kinds, op.Kind)
		if _, ok := op.Create["policy"]; ok {
			t.Fatal("the demo proposes a policy")
		}
	}
	if cs.Title == "" || cs.Summary == "" || strings.Join(kinds, ",") != "create_item,create_item,add_dependency" ||
		string(cs.Operations[2].Dependency) != `{"from":"$reset-api","to":"$reset-page","type":"blocks"}` {
		t.Fatalf("changeset = %s", proposal)
	}
	mustContain(t, final, "proposed a changeset")
	if rows := e.usageRows(t, 5); len(rows) != 5 || rows[0].Caller != "planner:"+e.principal().Session {
		t.Fatalf("usage = %+v", rows)
	}
}
