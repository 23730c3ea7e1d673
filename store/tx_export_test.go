package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// TxPipelined is the transaction the turn's writes run in, for its tests.
func (db *DB) TxPipelined(ctx context.Context, fn func(pgx.Tx) error) error {
	return db.txPipelined(ctx, fn)
}
