package gateway

import (
	"strings"
	"testing"
)

func TestConfigValidatesModelListsAndEmbeddingBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  func(*Config)
		want string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"empty lists", func(c *Config) { c.AnthropicModels, c.OpenAIModels, c.FakeModels = nil, nil, nil }, ""},
		{"vllm path", func(c *Config) { c.OpenAIModels = []string{"meta-llama/Llama-3.1-8B-Instruct"} }, ""},
		{"space", func(c *Config) { c.AnthropicModels = []string{"claude-a", "claude b"} }, "gateway.anthropic_models[1]: model: only letters"},
		{"empty name", func(c *Config) { c.OpenAIModels = []string{""} }, "gateway.openai_models[0]: model: field required"},
		{"too long", func(c *Config) { c.FakeModels = []string{strings.Repeat("x", maxModelLen+1)} }, "gateway.fake_models[0]: model: at most"},
		{"no inputs", func(c *Config) { c.EmbeddingsMaxInputs = 0 }, "gateway.embeddings_max_inputs: must be at least 1"},
		{"no bytes", func(c *Config) { c.EmbeddingsMaxInputBytes = 0 }, "gateway.embeddings_max_input_bytes: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.set(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
