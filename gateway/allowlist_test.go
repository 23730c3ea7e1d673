package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/balletplanner/ballet/gateway/fakellm"
	"github.com/balletplanner/ballet/gateway/llm"
	"github.com/balletplanner/ballet/store"
)

// TestModelAllowlists restricts the organization to two models and its
// project to one: through the official SDKs, a call for another model is
// refused 403 naming it, in the form of the route's API, before any
// upstream call; GET /v1/models lists only the model allowed.
func TestModelAllowlists(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakellm.MustParse(okScript), withConfig(func(c *Config) {
		c.AnthropicModels = []string{"claude-test", "claude-other", "claude-third"}
	}))
	ctx := context.Background()
	for _, a := range []store.ModelAllowlist{
		{OrganizationID: e.org, Models: []string{"claude-test", "claude-other"}, UpdatedBy: "alice"},
		{OrganizationID: e.org, ProjectID: e.project, Models: []string{"claude-test", "claude-third"}, UpdatedBy: "alice"},
	} {
		if _, err := e.db.PutModelAllowlist(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	client := e.anthropicSDK(t)
	params := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	}
	if _, err := client.Messages.New(ctx, params("claude-test")); err != nil {
		t.Fatalf("allowed model: %v", err)
	}
	tests := []struct {
		model, where string
	}{
		{"claude-other", "the model allow-list of project DEMO"},      // the organization's, not the project's
		{"claude-third", "the model allow-list of organization acme"}, // the project's cannot widen the organization's
		{"claude-unknown", "the model allow-list of organization acme"},
	}
	for _, tt := range tests {
		_, err := client.Messages.New(ctx, params(tt.model))
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != 403 || ae.Type() != "permission_error" {
			t.Fatalf("%s: err = %v", tt.model, err)
		}
		mustContain(t, ae.Message, `model "`+tt.model+`" is not allowed for project DEMO`, tt.where)
		if !strings.Contains(ae.RawJSON(), `"request_id":"`+ae.RequestID+`"`) {
			t.Fatalf("%s: error body %s lacks request_id %s", tt.model, ae.RawJSON(), ae.RequestID)
		}
		// count_tokens is refused alike.
		_, err = client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(tt.model),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
		if !errors.As(err, &ae) || ae.StatusCode != 403 {
			t.Fatalf("%s count_tokens: err = %v", tt.model, err)
		}
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("the upstream got %d calls, want the allowed one", n)
	}
	// Embeddings answer in the OpenAI form.
	oc := e.openaiSDK(t)
	_, err := oc.Embeddings.New(ctx, embedParams("hello"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 403 || oe.Type != llm.ErrPermission || oe.Code != "model_not_allowed" {
		t.Fatalf("embeddings: err = %v", err)
	}
	mustContain(t, oe.Message, `model "text-embedding-test" is not allowed for project DEMO`)
	// The catalogue lists what the project may call.
	var got []string
	pager := client.Models.ListAutoPaging(ctx, anthropic.ModelListParams{})
	for pager.Next() {
		got = append(got, pager.Current().ID)
	}
	if err := pager.Err(); err != nil || strings.Join(got, ",") != "claude-test" {
		t.Fatalf("models = %v (%v), want claude-test", got, err)
	}
}
