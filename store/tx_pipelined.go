package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// txPipelined runs fn in a transaction whose BEGIN goes to Postgres in the
// same round trip as its first statement or batch (pgx's Batch.BeginTx),
// where pgx.BeginFunc sends BEGIN and waits for its answer first. It
// commits when fn returns nil and rolls back otherwise, as Tx does. The
// turn's transactions (send, claim, every fenced write) run in it: one
// round trip fewer each, three of a one-round turn's fourteen.
func (db *DB) txPipelined(ctx context.Context, fn func(pgx.Tx) error) (err error) {
	tx := &pipelinedTx{db: db}
	defer func() {
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = rerr // a panic in fn, or a failed rollback after an error
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx) // fn's error is the one to return
		return err
	}
	return tx.Commit(ctx)
}

// pipelinedTx is the pgx.Tx of txPipelined. Until its first statement it
// holds no connection; that statement goes out in a batch that begins the
// transaction, and from then on every call is the begun pgx.Tx's. A call
// that cannot carry the BEGIN (Query, CopyFrom, Prepare, Begin,
// LargeObjects, Conn) begins the transaction on its own first.
type pipelinedTx struct {
	db     *DB
	tx     pgx.Tx // nil until begun
	closed bool   // committed or rolled back before it began
}

var _ pgx.Tx = (*pipelinedTx)(nil)

// send sends b, in a batch that begins the transaction when it has not
// begun yet; BEGIN's own result is read here, so that what the caller
// reads first is b's first result.
func (t *pipelinedTx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	switch {
	case t.tx != nil:
		return t.tx.SendBatch(ctx, b)
	case t.closed:
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	begin := &pgx.Batch{}
	begin.BeginTx(pgx.TxOptions{})
	begin.QueuedQueries = append(begin.QueuedQueries, b.QueuedQueries...)
	br := t.db.pool.SendBatch(ctx, begin)
	t.tx = br.Tx() // closed when the batch failed before BEGIN
	if _, err := br.Exec(); err != nil {
		return failedBatch{br: br, err: err}
	}
	return br
}

// begin begins the transaction with a round trip of its own.
func (t *pipelinedTx) begin(ctx context.Context) (pgx.Tx, error) {
	switch {
	case t.tx != nil:
		return t.tx, nil
	case t.closed:
		return nil, pgx.ErrTxClosed
	}
	tx, err := t.db.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t.tx = tx
	return tx, nil
}

// SendBatch sends b in the transaction.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.send(ctx, b)
}

// Exec runs one statement in the transaction.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx != nil {
		return t.tx.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.send(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// QueryRow runs one query in the transaction; Scan reads its row.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx != nil {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.send(ctx, b)
	return batchRow{row: br.QueryRow(), br: br}
}

// Query runs a query in the transaction.
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Query(ctx, sql, args...)
}

// CopyFrom copies rows in the transaction.
func (t *pipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares a statement on the transaction's connection.
func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// Begin starts a nested transaction (a savepoint).
func (t *pipelinedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// LargeObjects is the transaction's large objects; it begins the
// transaction, and without a context to do so it uses a background one.
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begin(context.Background())
	if err != nil {
		return pgx.LargeObjects{}
	}
	return tx.LargeObjects()
}

// Conn is the transaction's connection; it begins the transaction.
func (t *pipelinedTx) Conn() *pgx.Conn {
	tx, err := t.begin(context.Background())
	if err != nil {
		return nil
	}
	return tx.Conn()
}

// Commit commits the transaction; one that ran nothing has nothing to
// commit.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.tx != nil {
		return t.tx.Commit(ctx)
	}
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	return nil
}

// Rollback rolls the transaction back.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.tx != nil {
		return t.tx.Rollback(ctx)
	}
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	return nil
}

// batchRow is the row of a QueryRow sent with BEGIN: Scan reads it, then
// closes the batch.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// errRow is a row that fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// failedBatch is the results of a batch whose BEGIN failed: every read
// returns err, and Close closes what was sent.
type failedBatch struct {
	br  pgx.BatchResults
	err error
}

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return errRow{f.err} }
func (f failedBatch) Tx() pgx.Tx                       { return f.br.Tx() }
func (f failedBatch) Close() error {
	_ = f.br.Close() // f.err is the one to return
	return f.err
}
