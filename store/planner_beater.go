package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// BeaterName is the application_name of a worker's heartbeat connection.
const BeaterName = "ballet-heartbeat"

// Beater writes a worker's heartbeat on a connection of its own, outside
// the pool: turns that hold or wait for every pooled connection (a stale
// worker's locks, a slow statement) cannot starve the beat, and with it
// the worker's leases. A failed beat drops the connection; the next one
// dials again.
type Beater struct {
	db   *DB
	mu   sync.Mutex
	conn *pgx.Conn
}

// NewBeater returns a Beater on db's server; it connects at the first beat.
func (db *DB) NewBeater() *Beater { return &Beater{db: db} }

// BeatSlots is DB.BeatSlots on the beater's connection.
func (b *Beater) BeatSlots(ctx context.Context, id string, slots int, timeout time.Duration) error {
	return b.exec(ctx, "store: worker beat", beatSQL, id, timeout.String(), slots)
}

// StopBeating is DB.StopBeating on the beater's connection.
func (b *Beater) StopBeating(ctx context.Context, id string) error {
	return b.exec(ctx, "store: stop worker beat", stopBeatSQL, id)
}

// Close closes the connection.
func (b *Beater) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.Close(context.Background())
		b.conn = nil
	}
}

func (b *Beater) exec(ctx context.Context, op, sql string, args ...any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil {
		conn, err := b.db.connectOwn(ctx, BeaterName, nil)
		if err != nil {
			return fmt.Errorf("%s: connect: %w", op, err)
		}
		b.conn = conn
	}
	if _, err := b.conn.Exec(ctx, sql, args...); err != nil {
		_ = b.conn.Close(context.WithoutCancel(ctx))
		b.conn = nil
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}
