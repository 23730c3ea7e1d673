package store

import "github.com/jackc/pgx/v5"

// Every record type is read by one scan function, declared beside the
// constant that lists its columns in the order the function reads them:
// a query selects that constant (or RETURNING it) and hands its row to the
// function. Extra columns a query needs beside a record follow the
// record's columns and are read into the scan function's extra
// destinations where it has them.

// collect reads every row of rows with scan, the scan function of one
// record type.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (T, error)) ([]T, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
}

// collectOne reads the one row of rows with scan: none is pgx.ErrNoRows,
// more than one pgx.ErrTooManyRows.
func collectOne[T any](rows pgx.Rows, scan func(pgx.Row) (T, error)) (T, error) {
	return pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
}
