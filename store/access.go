package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AccessChannel is where Postgres announces, at commit, a subject whose
// access shrank (migration 00107): the payload is the subject.
const AccessChannel = "ballet_access"

// AccessListenerName is the application_name of an api's access listener.
const AccessListenerName = "ballet-access"

// ListenAccess opens a connection of its own, outside the pool, listening
// on AccessChannel; the caller waits on it and closes it.
func (db *DB) ListenAccess(ctx context.Context) (*pgx.Conn, error) {
	conn, err := db.connectOwn(ctx, AccessListenerName, nil)
	if err != nil {
		return nil, fmt.Errorf("store: listen for access changes: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{AccessChannel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("store: listen for access changes: %w", err)
	}
	return conn, nil
}
