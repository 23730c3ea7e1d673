package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The statements of IndexEmbedScope, for the plan test of store_test.
var (
	EmbedStaleSQL = embedStaleSQL
	EmbedTextsSQL = embedTextsSQL
	EmbedGoneSQL  = embedGoneSQL
)

// EmbedScanLimit is how many stale entities one IndexEmbedScope call takes.
const EmbedScanLimit = embedScanLimit

// IndexEmbedScopeLimit is IndexEmbedScope taking at most limit stale
// entities per call.
func IndexEmbedScopeLimit(ctx context.Context, db *DB, e Embedder, s EmbedScope, batch, limit int) (int, error) {
	return db.indexEmbedScope(ctx, e, s, batch, limit)
}

// DotBytes is the semantic leg's comparison, for BenchmarkVectorDecode.
var DotBytes = dotBytes

// RankItems runs the semantic leg alone: the query embedding of q and the
// ranking of the items of project by their vectors, in a read-only
// transaction, as Search does (BenchmarkSearchSemantic).
func RankItems(ctx context.Context, db *DB, es Embedders, organizationID, projectID, q string) ([]string, error) {
	e, qv := queryEmbedding(ctx, es, organizationID, projectID, q)
	var ids []string
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		ids, err = rankVectors(ctx, tx, e.Model(), embedItem, qv, vectorScope{projects: []string{projectID}}, searchCandidate)
		return err
	})
	return ids, err
}
