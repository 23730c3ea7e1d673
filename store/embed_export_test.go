package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The statements of IndexEmbedScope, for the plan test of store_test.
var (
	EmbedMissingSQL = embedMissingSQL
	EmbedChangedSQL = embedChangedSQL
	EmbedGoneSQL    = embedGoneSQL
)

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
