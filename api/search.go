package api

import (
	"context"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"

	"github.com/balletplanner/ballet/store"
)

// searchLegsHeader names the legs a search ran, fused by rank: always
// fulltext and trigram, and vector when the query was embedded.
const searchLegsHeader = "Ballet-Search-Legs"

func (s *Server) registerSearch(r fiber.Router) {
	r.Get("/search", s.search)
}

// search is GET /search?q&kind=item|skill&project&limit.
func (s *Server) search(c *fiber.Ctx) error {
	limit, err := kbQueryInt(c, "limit")
	if err != nil {
		return err
	}
	var legs searchLegs
	hits, err := s.db.Search(c.UserContext(), kbCaller(c), store.SearchQuery{
		Q: c.Query("q"), Kind: c.Query("kind"), Project: c.Query("project"), Limit: limit,
		Embedders: legs.watch(s.embedders)})
	if err != nil {
		return err
	}
	c.Set(searchLegsHeader, legs.String())
	return c.JSON(kbItems(hits))
}

// searchLegs notes whether a search's query was embedded, for
// searchLegsHeader. The store decides whom an embedding is metered to and
// turns the leg off when it may not run or its embedding fails; only an
// embedding that returned vectors counts as the vector leg.
type searchLegs struct{ vector atomic.Bool }

// watch wraps es so that a successful query embedding is noted; nil stays
// nil (the leg off).
func (l *searchLegs) watch(es store.Embedders) store.Embedders {
	if es == nil {
		return nil
	}
	return func(organizationID, projectID string) store.Embedder {
		e := es(organizationID, projectID)
		if e == nil {
			return nil
		}
		return watchedEmbedder{Embedder: e, legs: l}
	}
}

// String is the header value: "fulltext,trigram" or "fulltext,trigram,vector".
func (l *searchLegs) String() string {
	if l.vector.Load() {
		return "fulltext,trigram,vector"
	}
	return "fulltext,trigram"
}

// watchedEmbedder is an Embedder that reports its successful calls to legs.
type watchedEmbedder struct {
	store.Embedder
	legs *searchLegs
}

func (w watchedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	vecs, err := w.Embedder.Embed(ctx, texts)
	if err == nil && len(vecs) == len(texts) && len(texts) > 0 {
		w.legs.vector.Store(true)
	}
	return vecs, err
}
