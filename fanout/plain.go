package fanout

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/riversql"
	"github.com/riverbus/riverbus/migrations"
)

// The plain path: a pool with no ordering, no grouping, and no late event
// anywhere (the common case; see sqlNoLateEvents) is fanned out by one statement that
// locks the pool row, reads (cursor, horizon], builds each job's envelope
// in SQL, inserts the jobs, moves the cursor and sends River's insert
// notification, sent with its BEGIN and COMMIT in a single round trip. The
// events never travel to this process and back. Anything else, or a pool
// whose settings changed since the last look, takes the general path in
// batch.go, which is always correct; this one only has to say when it
// does not apply.

// plainKind is what the last look at a pool found: whether it can take the
// plain path, and with which form of the statement.
type plainKind uint8

const (
	plainUnknown plainKind = iota
	plainNo                // ordered or grouped: the general path
	plainAll               // no type filter
	plainTyped             // a type filter: the form that can use the (type, sequence) index
)

func plainKindOf(p *lockedPool) plainKind {
	switch {
	case p.ordering != bustype.OrderingNone || p.grouping != bustype.GroupNone:
		return plainNo
	case len(p.eventTypes) > 0:
		return plainTyped
	}
	return plainAll
}

// sqlPlainBatch is the plain path's statement; the first %s is the type
// condition.
// Each job's args are a workers.Args, riversql.EventArgs
// (envelope_test.go pins the two together); the job row and River's
// notification are package riversql's.
// $1 pool, $2 batch size, $3 whether the pool must have a type filter, $4
// the byte budget (Config.BatchBytes): the batch stops before the
// event whose stored bytes would take it past the budget, as the general
// path's read does (budgetedRead).
//
// It returns whether it locked the pool row, whether the plain path
// applied, the jobs inserted, the cursor after it, the notifications sent,
// whether it stopped before a big event, whether the byte budget cut it,
// and (the second %s) the traceparents of a traced batch's events or NULL.
// Every part reads one snapshot: no late event in it (sqlNoLateEvents)
// means none to deliver and none to record.
//
// Only small events take this path: data and metadata stored uncompressed
// in at most 32 kB together. A big one ends the batch just before it (the
// cursor stops there) and the general path handles it, where each event's
// depth is probed and each job inserted so that the database's refusal
// costs only that job (insert.go): a jsonb value nested deeper than
// encoding/json accepts (10,000 levels) takes at least 8 bytes a level, so
// none is small, and neither is one near jsonb's size limit. Reading the
// stored size and compression costs no detoasting.
const sqlPlainBatch = `WITH p AS (
	SELECT name, queue, event_types, tags, max_attempts, priority, cursor_seq,
		ordering = 'none' AND grouping = 'none' AND (cardinality(event_types) > 0) = $3 AS plain
	FROM riverbus_pool WHERE name = $1 AND status = 'active'
	FOR NO KEY UPDATE SKIP LOCKED
),
h AS (
	SELECT horizon FROM riverbus_horizon WHERE ` + sqlNoLateEvents + `
),
rd AS (
	SELECT e.global_sequence, e.event_id, e.type, e.key, e.tags, e.data, e.metadata, e.occurred_at, e.version,
		pg_column_compression(e.data) IS NULL AND pg_column_compression(e.metadata) IS NULL
			AND pg_column_size(e.data) + pg_column_size(e.metadata) <= 32768 AS small,
		sum(` + storedSize + `) OVER (ORDER BY e.global_sequence) - (` + storedSize + `) AS before
	FROM riverbus_event e
	WHERE e.global_sequence > (SELECT cursor_seq FROM p WHERE plain)
		AND e.global_sequence <= (SELECT horizon FROM h)
		AND e.tags @> (SELECT tags FROM p)%s
	ORDER BY e.global_sequence
	LIMIT $2
),
cut AS (
	SELECT min(global_sequence) AS at FROM rd WHERE NOT small OR before >= $4
),
ev AS (
	SELECT * FROM rd WHERE rd.global_sequence < coalesce((SELECT at FROM cut), 9223372036854775807)
),
ins AS (
	INSERT INTO river_job (` + riversql.JobColumnList + `)
	SELECT ` + eventEnvelope + `,
		p.name, p.max_attempts, ` + sqlJobTraceMetadata + `, p.priority, p.queue, 'available', '{}'
	FROM ev AS e CROSS JOIN p
	ORDER BY e.global_sequence
	RETURNING 1
),
n AS (
	SELECT (SELECT count(*) FROM ev) AS events, (SELECT count(*) FROM rd) AS read,
		(SELECT max(global_sequence) FROM rd) AS last, (SELECT at FROM cut) AS cut
),
adv AS (
	UPDATE riverbus_pool r SET
		cursor_seq = CASE WHEN n.cut IS NOT NULL THEN n.cut - 1 WHEN n.read = $2 THEN n.last ELSE h.horizon END,
		events_fanned_out = r.events_fanned_out + n.events,
		updated_at = now()
	FROM p, h, n
	WHERE r.name = p.name AND p.plain AND h.horizon > p.cursor_seq
		AND (n.cut IS NULL OR n.cut - 1 > p.cursor_seq)
	RETURNING r.cursor_seq
)
SELECT EXISTS (SELECT 1 FROM p),
	coalesce((SELECT plain FROM p), false) AND EXISTS (SELECT 1 FROM h),
	(SELECT count(*) FROM ins),
	coalesce((SELECT cursor_seq FROM adv), (SELECT cursor_seq FROM p)),
	(SELECT count(` + riversql.NotifyInsert + `)
		FROM p WHERE EXISTS (SELECT 1 FROM ins)),
	EXISTS (SELECT 1 FROM cut JOIN rd ON rd.global_sequence = cut.at WHERE NOT rd.small),
	EXISTS (SELECT 1 FROM cut JOIN rd ON rd.global_sequence = cut.at WHERE rd.small),
	%s`

// sqlJobTraceMetadata is a plain job's metadata: its event's W3C trace
// context, under the keys River's otelriver middleware reads
// (tracing.TraceParentKey, tracing.TraceStateKey), when the event's
// metadata holds a traceparent string; else {}. jobMetadata is the same
// on the general path.
const sqlJobTraceMetadata = `CASE WHEN jsonb_typeof(e.metadata->'traceparent') = 'string' AND e.metadata->>'traceparent' <> ''
			THEN jsonb_strip_nulls(jsonb_build_object('traceparent', e.metadata->'traceparent',
				'tracestate', CASE WHEN jsonb_typeof(e.metadata->'tracestate') = 'string' AND e.metadata->>'tracestate' <> ''
					THEN e.metadata->'tracestate' END))
			ELSE '{}' END`

// sqlPlainTraceParents is the last column of a traced plain batch: the
// traceparents of (at most spanLinksMax of) the events it fanned out, which
// its span links to; an untraced one returns NULL and reads nothing.
var sqlPlainTraceParents = `(SELECT array_agg(t.tp) FROM (
		SELECT ev.metadata->>'traceparent' AS tp FROM ev
		WHERE jsonb_typeof(ev.metadata->'traceparent') = 'string' AND EXISTS (SELECT 1 FROM ins)
		LIMIT ` + strconv.Itoa(spanLinksMax) + `) t)`

// sqlTypeCondition is the type condition of the plainTyped statement.
const sqlTypeCondition = "\n\t\tAND e.type = ANY((SELECT event_types FROM p)::text[])"

var (
	sqlPlainBatchAll     = fmt.Sprintf(sqlPlainBatch, "", "NULL::text[]")
	sqlPlainBatchTyped   = fmt.Sprintf(sqlPlainBatch, sqlTypeCondition, "NULL::text[]")
	sqlPlainBatchAllTr   = fmt.Sprintf(sqlPlainBatch, "", sqlPlainTraceParents)
	sqlPlainBatchTypedTr = fmt.Sprintf(sqlPlainBatch, sqlTypeCondition, sqlPlainTraceParents)
)

// fanOutPlain runs the plain path for pool name if the last look found it
// plain. handled is false when the general path must run instead.
// traceparents are those of the events it fanned out, when tracing (a
// batch span's links).
func (f *Fanout) fanOutPlain(ctx context.Context, name string) (res BatchResult, full, handled bool, traceparents []string, err error) {
	f.mu.Lock()
	kind := f.plain[name]
	noPlain := f.noPlain
	f.mu.Unlock()
	if noPlain || (kind != plainAll && kind != plainTyped) {
		return res, false, false, nil, nil
	}
	b := &pgx.Batch{}
	call := f.queuePlain(b, name, kind, false)
	res, full, handled, err = f.plainDone(call, f.db.SendBatch(ctx, b).Close())
	return res, full, handled, call.traceparents, err
}

// plainCall is one plain batch queued on a pgx.Batch (queuePlain), and what
// it returned.
type plainCall struct {
	name string
	*txCall
	locked   bool
	applied  bool
	jobs     int64
	cursor   *int64
	notified int64
	big      bool
	// overBudget: the byte budget cut the batch (it was full).
	overBudget bool
	// traceparents are those of the events fanned out, when tracing
	// (sqlPlainTraceParents).
	traceparents []string
}

// queuePlain queues pool name's plain batch on b: BEGIN, the schema check
// (which aborts the batch when the schema needs newer code), the settings,
// the statement of kind, COMMIT.
func (f *Fanout) queuePlain(b *pgx.Batch, name string, kind plainKind, riding bool) *plainCall {
	var sql string
	switch {
	case kind == plainTyped && f.tracer != nil:
		sql = sqlPlainBatchTypedTr
	case kind == plainTyped:
		sql = sqlPlainBatchTyped
	case f.tracer != nil:
		sql = sqlPlainBatchAllTr
	default:
		sql = sqlPlainBatchAll
	}
	c := &plainCall{name: name}
	limits := ""
	if riding {
		limits = sqlRideLimits
	}
	c.txCall = queueTx(b, f.gate.Code(), limits, func(row pgx.Row) error {
		return row.Scan(&c.locked, &c.applied, &c.jobs, &c.cursor, &c.notified, &c.big, &c.overBudget, &c.traceparents)
	}, sql, name, f.cfg.BatchSize, kind == plainTyped, f.cfg.BatchBytes)
	return c
}

// txCall is a statement queued on a pgx.Batch in a transaction of its own
// (queueTx), and whether it returned its row and the transaction
// committed.
type txCall struct {
	ran       bool
	committed bool
}

// queueTx queues on b: BEGIN, the schema check for code that knows
// version code (which aborts the transaction when the schema needs newer
// code), the batches' settings, limits (a ride's, sqlRideLimits, or ""),
// sql with args, whose row scan reads, and COMMIT.
func queueTx(b *pgx.Batch, code int, limits string, scan func(pgx.Row) error, sql string, args ...any) *txCall {
	c := &txCall{}
	b.Queue("BEGIN")
	b.Queue(migrations.SQLSchemaCheck, code)
	b.Queue(database.TxSettingsSQL)
	if limits != "" {
		b.Queue(limits)
	}
	b.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		if err := scan(row); err != nil {
			return err
		}
		c.ran = true
		return nil
	})
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		c.committed = ct.String() == "COMMIT"
		return nil
	})
	return c
}

// plainDone reads what a plain batch did, err being the error of the round
// trip that sent it. handled is false when the general path must run
// instead.
func (f *Fanout) plainDone(c *plainCall, err error) (res BatchResult, full, handled bool, _ error) {
	res.Pool = c.name
	name := c.name
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && refusedData(pgErr):
			// An envelope the database refused (a jsonb limit, say): the
			// general path finds which event it is and goes on.
			f.logger.Warn("plain fan-out path refused an event; taking the general path", "pool", name, "error", err)
			f.forgetPlain(name)
			return BatchResult{}, false, false, nil
		case errors.As(err, &pgErr) && pgerrcode.IsSyntaxErrororAccessRuleViolation(pgErr.Code):
			// The statement itself cannot run on this server (before
			// PostgreSQL 14, pg_column_compression does not exist): the
			// general path, always correct, takes every pool from now on.
			f.logger.Warn("plain fan-out path unavailable on this server; every pool takes the general path", "error", err)
			f.mu.Lock()
			f.noPlain = true
			f.mu.Unlock()
			return BatchResult{}, false, false, nil
		}
		return BatchResult{}, false, true, fmt.Errorf("fan out pool %q: %w", name, err)
	}
	res.Jobs = int(c.jobs)
	switch {
	case !c.locked:
		return res, false, true, nil // paused, deleted, or another instance has it
	case !c.applied:
		f.forgetPlain(name) // look again on the general path
		return res, false, false, nil
	}
	if c.cursor != nil {
		res.Cursor = *c.cursor
	}
	if c.big {
		// The batch stopped before a big event: the general path takes it
		// now, and hands the pool back to this path after it.
		f.batchDone(res)
		return res, false, false, nil
	}
	full = res.Jobs == f.cfg.BatchSize || c.overBudget
	if !full && c.cursor != nil {
		f.mu.Lock()
		f.heads[name] = *c.cursor
		f.mu.Unlock()
	}
	return res, full, true, nil
}

func (f *Fanout) forgetPlain(name string) {
	f.mu.Lock()
	delete(f.plain, name)
	delete(f.heads, name)
	f.mu.Unlock()
}
