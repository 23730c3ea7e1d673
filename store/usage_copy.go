package store

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// A batch of usage rows goes to Postgres by COPY into a temporary table of
// the connection, and from there into usage with the checks an INSERT can
// make and COPY cannot (request ids already stored, organizations and
// projects deleted since the call), in one transaction. COPY streams rows
// in pgx's pooled 64 KB chunks: a batch costs the gateway no per-value
// encoding, where array parameters allocated about 3 KB a row.
const (
	// usageIncomingDDL creates the connection's staging table once; its
	// rows go at each commit.
	usageIncomingDDL = `CREATE TEMP TABLE IF NOT EXISTS usage_incoming (
    ord int, request_id text, org text, project text, session text, caller text, acting_for text,
    provider text, model text, status int, input bigint, output bigint, cache_read bigint,
    cache_write bigint, estimated bool, duration int, created timestamptz, cost bigint
) ON COMMIT DELETE ROWS`

	usageCopySQL = `COPY usage_incoming (ord, request_id, org, project, session, caller, acting_for,
    provider, model, status, input, output, cache_read, cache_write, estimated, duration, created, cost) FROM STDIN`

	usageMoveSQL = `
INSERT INTO usage (request_id, organization_id, project_id, session_id, caller, acting_for,
                   provider, model, status, input_tokens, output_tokens, cache_read_tokens,
                   cache_write_tokens, estimated, duration_ms, created_at, cost_micro_usd)
SELECT u.request_id, u.org::uuid, NULLIF(u.project, '')::uuid, NULLIF(u.session, '')::uuid,
       u.caller, NULLIF(u.acting_for, ''), u.provider, u.model, u.status,
       GREATEST(u.input, 0), GREATEST(u.output, 0), GREATEST(u.cache_read, 0), GREATEST(u.cache_write, 0),
       u.estimated, u.duration, u.created, CASE WHEN u.cost >= 0 THEN u.cost END
FROM usage_incoming u
WHERE EXISTS (SELECT 1 FROM organizations o WHERE o.id = u.org::uuid)
  AND (u.project = '' OR EXISTS (SELECT 1 FROM projects p WHERE p.id = NULLIF(u.project, '')::uuid))
ORDER BY u.ord
ON CONFLICT (request_id) DO NOTHING`
)

// InsertUsage writes a batch of usage rows in one transaction and returns
// how many were new. Rows whose request_id is already stored are skipped,
// and so are rows of an organization or project deleted since the call: a
// batch never fails because of one stale row.
func (db *DB) InsertUsage(ctx context.Context, rows []Usage) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	buf := getUsageCopyBuf()
	defer putUsageCopyBuf(buf)
	now := time.Now()
	for i := range rows {
		appendUsageCopyRow(buf, i, &rows[i], now)
	}
	var n int64
	err := db.txPipelined(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, usageIncomingDDL); err != nil {
			return err
		}
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(buf.Bytes()), usageCopySQL); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, usageMoveSQL)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: insert usage: %w", err)
	}
	return n, nil
}

// usageCopyBufs keep the COPY text buffers of batches for the next ones: a
// free list rather than a sync.Pool, which drops them at every other GC
// when batches are further apart.
var usageCopyBufs = make(chan *bytes.Buffer, 4)

// maxKeptUsageCopyBuf bounds a buffer kept for the next batch.
const maxKeptUsageCopyBuf = 4 << 20

func getUsageCopyBuf() *bytes.Buffer {
	select {
	case b := <-usageCopyBufs:
		b.Reset()
		return b
	default:
		return new(bytes.Buffer)
	}
}

func putUsageCopyBuf(b *bytes.Buffer) {
	if b.Cap() > maxKeptUsageCopyBuf {
		return
	}
	select {
	case usageCopyBufs <- b:
	default:
	}
}

// appendUsageCopyRow appends u as a line of COPY's text format, as the
// ord-th row; a zero CreatedAt is now. Status and duration are 32-bit
// columns: they wrap as a Go int32 conversion does rather than fail the
// batch.
func appendUsageCopyRow(buf *bytes.Buffer, ord int, u *Usage, now time.Time) {
	buf.Grow(512)
	b := buf.AvailableBuffer()
	b = strconv.AppendInt(b, int64(ord), 10)
	for _, s := range [...]string{u.RequestID, u.OrganizationID, u.ProjectID, u.SessionID, u.Caller, u.ActingFor, u.Provider, u.Model} {
		b = appendCopyText(append(b, '\t'), s)
	}
	for _, n := range [...]int64{int64(int32(u.Status)), u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens} {
		b = strconv.AppendInt(append(b, '\t'), n, 10)
	}
	if u.Estimated {
		b = append(b, "\tt"...)
	} else {
		b = append(b, "\tf"...)
	}
	b = strconv.AppendInt(append(b, '\t'), int64(int32(u.DurationMS)), 10)
	created := u.CreatedAt
	if created.IsZero() {
		created = now
	}
	// Microseconds, cut as pgx cuts a time.Time for a timestamptz.
	b = created.UTC().AppendFormat(append(b, '\t'), "2006-01-02 15:04:05.999999Z07:00")
	if u.CostMicroUSD == nil {
		b = append(b, "\t\\N"...)
	} else {
		b = strconv.AppendInt(append(b, '\t'), *u.CostMicroUSD, 10)
	}
	buf.Write(append(b, '\n'))
}

// appendCopyText appends s as a field of COPY's text format: backslash,
// tab, newline and carriage return escaped.
func appendCopyText(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '\t':
			b = append(b, `\t`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		default:
			b = append(b, c)
		}
	}
	return b
}
