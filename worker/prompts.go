package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/balletplanner/ballet/internal/ttlcache"
	"github.com/balletplanner/ballet/store"
)

// promptTTL is how long a built system prompt is reused: a skill published
// or a project renamed reaches new turns within it.
const promptTTL = 10 * time.Second

// promptLoadTimeout bounds the reads that build one prompt. They run apart
// from the turn that started them, since other turns may wait on them.
const promptLoadTimeout = 10 * time.Second

// prompt is a built system prompt and the project it is for.
type prompt struct {
	project store.Project
	system  string
}

// promptStore is what building a system prompt reads; the store
// (*store.DB) provides it.
type promptStore interface {
	ProjectByKey(ctx context.Context, keyOrID string) (store.Project, error)
	OrganizationByKey(ctx context.Context, keyOrID string) (store.Organization, error)
	Principal(ctx context.Context, subject string) (*store.Principal, error)
	ResolveSkill(ctx context.Context, caller store.Caller, projectKey, name string) (store.ResolvedSkill, error)
}

// prepare gives the attempt its system prompt (instructions, project and
// organization, and the resolved planner skill as the human sees it) and
// its project. Prompts are cached per project and human for promptTTL, and
// built once for all the turns that ask at the same time, so a burst of
// turns reads them once.
func (a *attempt) prepare(ctx context.Context) error {
	s, author := a.claim.Session, a.claim.Turn.Author
	p, err := a.w.prompts.get(ctx, s.ProjectID+"\x00"+author, func(ctx context.Context) (prompt, error) {
		return buildPrompt(ctx, a.w.promptDB, a.w.planner, s, author, a.log)
	})
	if err != nil {
		return err
	}
	a.project, a.system = p.project, p.system
	return nil
}

// buildPrompt reads what the system prompt of a turn of author in session s
// says. A planner skill that cannot be resolved is left out.
func buildPrompt(ctx context.Context, db promptStore, cfg PlannerConfig, s store.Session, author string, log *slog.Logger) (prompt, error) {
	p, err := db.ProjectByKey(ctx, s.Project)
	if err != nil {
		return prompt{}, err
	}
	o, err := db.OrganizationByKey(ctx, s.OrganizationID)
	if err != nil {
		return prompt{}, err
	}
	var skill string
	var version int
	if name := cfg.Skill; name != "" {
		principal, err := db.Principal(ctx, author)
		if err != nil {
			return prompt{}, err
		}
		caller := store.Caller{Principal: principal, Actor: store.PlannerActor(s.ID, author)}
		res, err := db.ResolveSkill(ctx, caller, p.Key, name)
		switch {
		case err == nil:
			skill, version = res.Body, res.ResolvedVersion
		case !store.IsCode(err, store.CodeNotFound):
			log.WarnContext(ctx, "resolve planner skill; going on without it", slog.Any("error", err))
		}
	}
	return prompt{project: p, system: systemPrompt(p.Key, p.Name, p.Description, o.Name, author, cfg.Skill, version, skill)}, nil
}

// maxCachedPrompts bounds the prompts kept.
const maxCachedPrompts = 10000

// promptCache keeps system prompts by project and human for promptTTL;
// concurrent lookups of a key that is not cached share one load. The zero
// value is ready to use.
type promptCache struct {
	once  sync.Once
	cache *ttlcache.Cache[prompt]
	// waiting counts the lookups that missed and wait on a load.
	waiting atomic.Int64
}

// get returns the prompt under key, loading it when it is missing or older
// than promptTTL. A load runs once for all the lookups of its key that
// arrive while it runs, apart from the context of the one that started it;
// a lookup whose ctx ends stops waiting. A failed load is not cached.
func (c *promptCache) get(ctx context.Context, key string, load func(context.Context) (prompt, error)) (prompt, error) {
	c.once.Do(func() { c.cache = ttlcache.New[prompt](maxCachedPrompts, nil) })
	if p, ok := c.cache.Get(key); ok {
		return p, nil
	}
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	return c.cache.Load(ctx, key, func(ctx context.Context) (prompt, time.Time, error) {
		lctx, cancel := context.WithTimeout(ctx, promptLoadTimeout)
		defer cancel()
		p, err := load(lctx)
		return p, time.Now().Add(promptTTL), err
	})
}
