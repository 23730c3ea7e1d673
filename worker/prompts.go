package worker

import (
	"sync"
	"time"

	"github.com/balletplanner/ballet/store"
)

// promptTTL is how long a built system prompt is reused: a skill published
// or a project renamed reaches new turns within it.
const promptTTL = 10 * time.Second

// prompt is a built system prompt and the project it is for.
type prompt struct {
	project store.Project
	system  string
	at      time.Time
}

// promptCache keeps system prompts by project and human for promptTTL.
type promptCache struct {
	mu      sync.Mutex
	entries map[string]prompt
}

func (c *promptCache) get(key string) (prompt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.entries[key]
	if !ok || time.Since(p.at) > promptTTL {
		return prompt{}, false
	}
	return p, true
}

func (c *promptCache) put(key string, p prompt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > 10000 {
		c.entries = map[string]prompt{} // bounded: start over rather than grow
	}
	p.at = time.Now()
	c.entries[key] = p
}
