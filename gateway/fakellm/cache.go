package fakellm

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"
)

// Prompt caching, the Anthropic way: a request marks breakpoints with
// cache_control on tool definitions, system blocks and message blocks. The
// prompt is read as one sequence of blocks (the tools, then the system
// prompt, then the messages' blocks); the prefix ending at each breakpoint
// is cached for cacheTTL. A request reads the longest cached prefix that
// ends at one of its breakpoints or at one of the cacheLookback blocks
// before one (cache_read_input_tokens), writes the prefixes of its
// breakpoints past it, up to the last breakpoint
// (cache_creation_input_tokens), and pays the rest as input_tokens. A prefix
// shorter than minCacheTokens is never cached. Tokens are counted as the
// fake counts them everywhere: four characters a token, here of the blocks
// serialised canonically (keys sorted, cache_control left out, with the
// message around a message's first block), so that a marker moving does
// not change what a prefix is.
const (
	// cacheTTL is how long a cached prefix lives after it was last written or read.
	cacheTTL = 5 * time.Minute
	// minCacheTokens is the shortest prefix a breakpoint caches.
	minCacheTokens = 1024
	// cacheLookback is how many blocks before a breakpoint a cached prefix
	// may end and still be read.
	cacheLookback = 20
)

// promptCache holds the prefixes one fake server has cached; its zero value
// is empty and ready.
type promptCache struct {
	mu      sync.Mutex
	now     func() time.Time // nil: time.Now
	entries map[[32]byte]time.Time
	swept   time.Time
}

// prefixBlock is one block of a prompt in cache order, with the identity
// and the size of the prefix that ends with it.
type prefixBlock struct {
	hash       [32]byte
	tokens     int64
	breakpoint bool
}

// cacheRequest is what caching reads of a Messages API request.
type cacheRequest struct {
	Model    string            `json:"model"`
	Tools    []json.RawMessage `json:"tools"`
	System   json.RawMessage   `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// anthropicUsage is the usage of an answer to an Anthropic request body:
// the scripted figures when the answer gives them, else the fake's estimate
// split into cache reads, cache writes and input by the request's
// breakpoints.
func (s *Server) anthropicUsage(a *Answer, body []byte) Usage {
	u := a.usage(body)
	if a.Usage != nil {
		return u
	}
	blocks := promptBlocks(body)
	read, write := s.cache.use(blocks)
	u.CacheReadInputTokens, u.CacheCreationInputTokens = read, write
	u.InputTokens = max(u.InputTokens-read-write, 0)
	return u
}

// use looks the prompt up, caches its breakpoints' prefixes and returns the
// tokens read from and written to the cache.
func (c *promptCache) use(blocks []prefixBlock) (read, write int64) {
	last := -1
	for i, b := range blocks {
		if b.breakpoint {
			last = i
		}
	}
	if last < 0 {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	c.sweep(now)
	hit := -1
	for i, b := range blocks {
		if !b.breakpoint {
			continue
		}
		for j := i; j >= max(0, i-cacheLookback) && j > hit; j-- {
			if exp, ok := c.entries[blocks[j].hash]; ok && now.Before(exp) {
				hit = j
				break
			}
		}
	}
	if c.entries == nil {
		c.entries = map[[32]byte]time.Time{}
	}
	if hit >= 0 {
		read = blocks[hit].tokens
		c.entries[blocks[hit].hash] = now.Add(cacheTTL)
	}
	for i := hit + 1; i <= last; i++ {
		if b := blocks[i]; b.breakpoint && b.tokens >= minCacheTokens {
			c.entries[b.hash] = now.Add(cacheTTL)
			write = b.tokens - read
		}
	}
	return read, write
}

// sweep forgets expired prefixes, at most every tenth of their lifetime.
func (c *promptCache) sweep(now time.Time) {
	if now.Sub(c.swept) < cacheTTL/10 {
		return
	}
	c.swept = now
	for k, exp := range c.entries {
		if !now.Before(exp) {
			delete(c.entries, k)
		}
	}
}

// promptBlocks reads the prompt of a request body in cache order: tools,
// system blocks, then each message's blocks. An unreadable body has none.
func promptBlocks(body []byte) []prefixBlock {
	var req cacheRequest
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var out []prefixBlock
	h := sha256.Sum256([]byte("model\x00" + req.Model))
	var chars int64
	add := func(kind string, raw json.RawMessage, wrapper int) {
		canon, marked := canonical(raw)
		sum := sha256.New()
		sum.Write(h[:])
		sum.Write([]byte(kind + "\x00"))
		sum.Write(canon)
		copy(h[:], sum.Sum(nil))
		chars += int64(len(canon) + 1 + wrapper) // a comma, and the message around the first block
		out = append(out, prefixBlock{hash: h, tokens: (chars + 3) / 4, breakpoint: marked})
	}
	for _, t := range req.Tools {
		add("tool", t, 0)
	}
	for _, b := range contentBlocks(req.System) {
		add("system", b, 0)
	}
	for _, m := range req.Messages {
		for i, b := range contentBlocks(m.Content) {
			kind, wrapper := "block", 0
			if i == 0 { // a new message starts here
				kind, wrapper = "message "+m.Role, len(`{"role":"","content":[]}`)+len(m.Role)
			}
			add(kind, b, wrapper)
		}
	}
	return out
}

// contentBlocks splits content (a string or an array of blocks) into
// blocks; a string is one text block.
func contentBlocks(raw json.RawMessage) []json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		return []json.RawMessage{jsonMarshal(map[string]any{"type": "text", "text": s})}
	}
	var blocks []json.RawMessage
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	return blocks
}

// canonical serialises a block with sorted keys and without its
// cache_control marker, and reports whether it had one.
func canonical(raw json.RawMessage) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return raw, false
	}
	marked := false
	if m, ok := v.(map[string]any); ok {
		cc, has := m["cache_control"]
		marked = has && cc != nil
		delete(m, "cache_control")
	}
	return jsonMarshal(v), marked
}
