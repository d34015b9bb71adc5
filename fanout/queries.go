package fanout

import (
	"github.com/riverbus/riverbus/internal/riversql"
)

// The SQL of the pools' fan-out. Identifiers are never built from input.
// The horizon round's SQL is in roundqueries.go, the horizon facts' in
// internal/horizon, the lanes' in internal/lanes.

const (
	sqlActivePoolNames = `SELECT name FROM riverbus_pool WHERE status = 'active' ORDER BY name`

	// river_job's statistics (jobAnalyzer), and its rows according to them.
	sqlAnalyzeJobs = `ANALYZE river_job`
	sqlJobRows     = `SELECT coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass('river_job')), 0)::float8`
)

// Fan-out.
const (
	sqlPoolLock = `SELECT queue, event_types, tags, max_attempts, priority, start_after, cursor_seq,
	ordering, on_dead_letter, grouping
FROM riverbus_pool WHERE name = $1 AND status = 'active' FOR NO KEY UPDATE SKIP LOCKED`

	// The horizon (an error naming the repair when its row is missing), and
	// whether any late event may exist: a skipped range or a late event not
	// yet retired.
	sqlHorizonAndSkipped = `SELECT coalesce((SELECT horizon FROM riverbus_horizon), riverbus_horizon_missing()),
	EXISTS (SELECT 1 FROM riverbus_skipped) OR EXISTS (SELECT 1 FROM riverbus_late)`

	// eventHeadColumns are what the general path reads of an event:
	// everything but its payload (data and metadata), which never travels
	// to this process (the jobs' args are built by the insert,
	// sqlInsertJobs), and the trace context the job's metadata carries,
	// read from the event's metadata as tracing.FromMetadata reads it.
	eventHeadColumns = `e.global_sequence, e.event_id, e.type, e.key, e.tags, e.occurred_at, e.version, e.transaction_id::text AS txid,
	CASE WHEN jsonb_typeof(e.metadata->'traceparent') = 'string' THEN e.metadata->>'traceparent' ELSE '' END AS traceparent,
	CASE WHEN jsonb_typeof(e.metadata->'tracestate') = 'string' THEN e.metadata->>'tracestate' ELSE '' END AS tracestate`

	// storedSize is an event's size as stored: compressed where PostgreSQL
	// compressed it, read from the values' headers without detoasting them.
	// The batches' byte budget counts it.
	storedSize = `pg_column_size(e.data) + pg_column_size(e.metadata)`

	// eventColumns: the head and the stored size.
	eventColumns = eventHeadColumns + `, ` + storedSize + ` AS size`

	// A budgeted read of events (e): at most $4 (the batch size) of them in
	// sequence order, cut before the first whose stored bytes would take
	// the read past $5 (the byte budget); the first is always taken, so a
	// batch always progresses. Its last column is how many events the read
	// took before the cut, so the caller knows whether the budget cut it.
	// The running sum streams, so the LIMIT still stops the scan.
	budgetedRead = `WITH r AS MATERIALIZED (
	SELECT ` + eventColumns + `, sum(` + storedSize + `) OVER (ORDER BY e.global_sequence) AS running`
	budgetedCut = `
	ORDER BY e.global_sequence LIMIT $4
)
SELECT r.global_sequence, r.event_id, r.type, r.key, r.tags, r.occurred_at, r.version, r.txid, r.traceparent, r.tracestate,
	r.size, (SELECT count(*) FROM r)
FROM r WHERE r.running - r.size < $5 ORDER BY r.global_sequence`

	// Two forms so the type filter can use the (type, global_sequence)
	// index.
	sqlEventsAll = budgetedRead + `
FROM riverbus_event e
WHERE e.global_sequence > $1 AND e.global_sequence <= $2 AND e.tags @> $3` + budgetedCut

	sqlEventsOfTypes = budgetedRead + `
FROM riverbus_event e
WHERE e.global_sequence > $1 AND e.global_sequence <= $2 AND e.tags @> $3 AND e.type = ANY($6)` + budgetedCut

	// Events in skipped ranges (or late) that the normal path just read
	// (and delivered): recorded so the late path does not deliver them
	// again. Such events it did not read (filtered out, or committed after
	// the read) are left to the late path, which records them when it
	// handles them.
	sqlPoolLateRecordRange = `INSERT INTO riverbus_pool_late (pool, sequence)
SELECT $1, s.sequence FROM unnest($2::bigint[]) AS s(sequence)
WHERE EXISTS (SELECT 1 FROM riverbus_late l WHERE l.sequence = s.sequence) OR ` + sqlCoveredBySkipped + `
ON CONFLICT DO NOTHING`

	// Late events for a pool: committed events at or below its cursor (and
	// above its start) that are late (riverbus_late) or lie inside a skipped
	// range (late, not yet marked by a round), and that the pool has not
	// handled. Driven by the late events and the ranges, never by the log.
	// Budgeted as a batch's events are ($4, $5): the late path reads as
	// much as the normal path at most.
	sqlLateEvents = budgetedRead + ` FROM (
	SELECT l.sequence AS seq FROM riverbus_late l WHERE l.sequence <= $2 AND l.sequence > $3
	UNION
	SELECT e.global_sequence FROM riverbus_skipped s
	JOIN riverbus_event e ON e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence
	WHERE s.first_sequence <= $2 AND s.last_sequence > $3 AND e.global_sequence <= $2 AND e.global_sequence > $3
) c
JOIN riverbus_event e ON e.global_sequence = c.seq
WHERE NOT EXISTS (SELECT 1 FROM riverbus_pool_late pl WHERE pl.pool = $1 AND pl.sequence = c.seq)` + budgetedCut

	// Whether no late event can be pending: none recorded and not yet
	// retired, and no committed event inside a skipped range (one index
	// probe per range). Ranges of numbers that never commit (burned, or of
	// transactions still open) leave it true; an event committing inside
	// one after the statement's snapshot was not read by it, and is left to
	// the late path.
	sqlNoLateEvents = `NOT EXISTS (SELECT 1 FROM riverbus_late)
		AND NOT EXISTS (SELECT 1 FROM riverbus_skipped s WHERE EXISTS (SELECT 1 FROM riverbus_event e
			WHERE e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence))`

	sqlPoolLateRecord = `INSERT INTO riverbus_pool_late (pool, sequence)
SELECT $1, s FROM unnest($2::bigint[]) AS s ON CONFLICT DO NOTHING`

	// Transaction groups (group.go). $1 is the pool, $2 its tag filter, $3
	// its type filter (empty: every type); the groups come as arrays, one
	// element per group, with first, the group's first event in the batch.
	//
	// A group is new unless the pool has a matching event of it in
	// (floor, first): in that case a batch at or before that event (or the
	// late path) delivered it. Only new groups are read, from first on:
	// each transaction is read once however many batches it spans.
	//
	// The probe must run as an index scan backwards from first that stops
	// at its first match: across the batches of one transaction it then
	// reads each event at most once. So it is a scalar subquery (run per
	// group, never turned into a join over the whole table) with a LIMIT 1
	// on the scan itself, under enable_bitmapscan off (sqlBitmapScanOff: a
	// bitmap, then a sort, would read the whole range), and it gives the
	// planner one good index: (transaction_id, global_sequence), or per key
	// (key, global_sequence), an equality and a range on its two columns.
	// The filters are written so that no index can take them (an OR with a
	// parameter-only arm; the transaction id compared as text in the key
	// form): through the type, tag or transaction index, a probe would scan
	// every event of the type, tag or transaction instead.
	sqlGroupFilter = `(cardinality($2::text[]) = 0 OR e.tags @> $2) AND (cardinality($3::text[]) = 0 OR e.type = ANY($3))`

	// Bitmap scans off for the group statement: with its row estimates the
	// planner would take one (and a sort) for the probe, which then reads
	// the whole range instead of stopping at the first match. The setting
	// is put back after the statement (riverbus.bitmapscan keeps it).
	sqlBitmapScanOff = `SELECT set_config('riverbus.bitmapscan', current_setting('enable_bitmapscan'), true),
	set_config('enable_bitmapscan', 'off', true)`
	sqlBitmapScanRestore = `SELECT set_config('enable_bitmapscan', current_setting('riverbus.bitmapscan'), true)`

	// The pool's start point (no riverbus_pool_start row: start_after).
	sqlPoolGroupFloor = `SELECT ` + poolGroupFloor

	poolGroupFloor = `coalesce((SELECT group_floor FROM riverbus_pool_start WHERE pool = $1),
	(SELECT start_after FROM riverbus_pool WHERE name = $1))`

	// One group per transaction ($4 transaction ids, $5 firsts).
	sqlTransactionGroups = `WITH g AS MATERIALIZED (
	SELECT u.ord, u.txid::xid8 AS txid, u.first
	FROM unnest($4::text[], $5::bigint[]) WITH ORDINALITY AS u(txid, first, ord),
		(SELECT ` + poolGroupFloor + ` AS floor) p
	WHERE (
		SELECT 1 FROM riverbus_event e
		WHERE e.transaction_id = u.txid::xid8 AND e.global_sequence > p.floor AND e.global_sequence < u.first
			AND ` + sqlGroupFilter + `
		ORDER BY e.transaction_id DESC, e.global_sequence DESC
		LIMIT 1) IS NULL
)
SELECT g.ord, ` + eventColumns + `
FROM g CROSS JOIN LATERAL (
	SELECT * FROM riverbus_event e
	WHERE e.transaction_id = g.txid AND e.global_sequence >= g.first AND ` + sqlGroupFilter + `
	ORDER BY e.transaction_id, e.global_sequence
) e
ORDER BY g.ord, e.global_sequence`

	// One group per transaction and key, for key-ordered pools ($4
	// transaction ids, $5 keys, $6 firsts). Through the key index, bounded
	// to the transaction's span, so a transaction of many keys is not read
	// once per key.
	sqlTransactionKeyGroups = `WITH u AS MATERIALIZED (
	SELECT u.ord, u.txid, u.key, u.first,
		(SELECT min(t.global_sequence) FROM riverbus_event t WHERE t.transaction_id = u.txid::xid8) AS tx_first,
		(SELECT max(t.global_sequence) FROM riverbus_event t WHERE t.transaction_id = u.txid::xid8) AS tx_last
	FROM unnest($4::text[], $5::text[], $6::bigint[]) WITH ORDINALITY AS u(txid, key, first, ord)
),
g AS MATERIALIZED (
	SELECT u.* FROM u, (SELECT ` + poolGroupFloor + ` AS floor) p
	WHERE u.tx_first >= u.first OR (
		SELECT 1 FROM riverbus_event e
		WHERE e.key = u.key AND e.global_sequence > GREATEST(p.floor, u.tx_first - 1) AND e.global_sequence < u.first
			AND e.transaction_id::text = u.txid AND ` + sqlGroupFilter + `
		ORDER BY e.key DESC, e.global_sequence DESC
		LIMIT 1) IS NULL
)
SELECT g.ord, ` + eventColumns + `
FROM g CROSS JOIN LATERAL (
	SELECT * FROM riverbus_event e
	WHERE e.key = g.key AND e.global_sequence >= g.first AND e.global_sequence <= g.tx_last
		AND e.transaction_id::text = g.txid AND ` + sqlGroupFilter + `
	ORDER BY e.key, e.global_sequence
) e
ORDER BY g.ord, e.global_sequence`

	sqlPoolAdvance = `UPDATE riverbus_pool SET cursor_seq = $2, events_fanned_out = events_fanned_out + $3,
	late_events_delivered = late_events_delivered + $4, updated_at = now() WHERE name = $1`
)

// The general path's insert (insert.go).
const (
	// eventEnvelope is the args of an event's job (riversql.EventArgs); the
	// plain path builds its jobs with it too.
	eventEnvelope = riversql.EventArgs

	// The jobs of a batch, their args built here from riverbus_event, so
	// the events' payload never leaves the database. $1 kind, $2 max
	// attempts, $3 priority, $4 queue; $5 the jobs' events, one after the
	// other; then one element per job, in insert order: $6 its first
	// event, $7 and $8 the bounds of its events in $5, $9 its transaction
	// (a group's part; NULL for an event's job), $10 the group's key, $11
	// late, $12 and $13 its part and the number of parts, $14 its state,
	// $15 its metadata. A group part's args are a workers.GroupArgs.
	//
	// A group's events are aggregated in the order of a sorted subquery of
	// their sequences, not with ORDER BY in the aggregate: that would sort
	// the envelopes themselves, spilling every big one to disk. Late is
	// added only to a late job's args: adding an empty object would copy
	// every job's args once more.
	sqlInsertJobs = `INSERT INTO river_job (` + riversql.JobColumnList + `)
SELECT CASE WHEN j.late THEN a.args || '{"late": true}'::jsonb ELSE a.args END,
	$1, $2, j.meta, $3, $4, j.state::river_job_state, '{}'
FROM unnest($6::bigint[], $7::int[], $8::int[], $9::text[], $10::text[], $11::bool[], $12::int[], $13::int[],
	$14::text[], $15::jsonb[]) WITH ORDINALITY AS j(first, lo, hi, txid, key, late, part, parts, state, meta, ord)
CROSS JOIN LATERAL (
	SELECT CASE WHEN j.txid IS NULL THEN (SELECT ` + eventEnvelope + ` FROM riverbus_event e WHERE e.global_sequence = j.first)
		ELSE jsonb_build_object('global_sequence', j.first, 'transaction_id', j.txid, 'key', j.key,
			'events', (SELECT jsonb_agg((SELECT ` + eventEnvelope + ` FROM riverbus_event e WHERE e.global_sequence = u.seq))
				FROM (SELECT seq FROM unnest(($5::bigint[])[j.lo:j.hi]) AS seq ORDER BY seq) u),
			'part', j.part, 'parts', j.parts) END AS args
) a
ORDER BY j.ord`

	// The events $1 (probeEvents): whether their data or metadata have an
	// item at the depth $2 (a jsonpath) or deeper, and, when $3, the size
	// of the data and metadata of those that do not, as jsonb (a group
	// part's bound: the jsonb limit counts it, and stored sizes may be
	// compressed), unless their stored size already reaches $4 (a part's
	// bound: such an event is a part of its own whatever its size as
	// jsonb, which is at least its stored size). Walking a value too deep
	// for the server's stack fails the statement.
	sqlProbeEvents = `SELECT e.global_sequence, e.deep,
	CASE WHEN NOT $3 OR e.deep THEN 0
		WHEN ` + storedSize + ` >= $4 THEN ` + storedSize + `
		ELSE pg_column_size(jsonb_build_array(e.data, e.metadata)) END
FROM (SELECT e.*, jsonb_path_exists(e.data, $2::jsonpath) OR jsonb_path_exists(e.metadata, $2::jsonpath) AS deep
	FROM riverbus_event e WHERE e.global_sequence = ANY ($1::bigint[]) OFFSET 0) e`

	// Dead letters of units that cannot become jobs: discarded at once,
	// with the reason as their one error (River's AttemptError shape), so
	// the trigger riverbus_dead_letter_keep_insert keeps them.
	sqlInsertUndeliverable = `INSERT INTO river_job (` + riversql.JobColumnList + `, attempt, errors, finalized_at)
SELECT u.a, $1, $2, u.m, $3, $4, 'discarded', '{}', 0,
	ARRAY[jsonb_build_object('at', now(), 'attempt', 0, 'error', u.r, 'trace', '')], now()
FROM unnest($5::jsonb[], $6::jsonb[], $7::text[]) WITH ORDINALITY AS u(a, m, r, i)
ORDER BY u.i`
)
