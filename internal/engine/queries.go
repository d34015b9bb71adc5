package engine

// All SQL of the fanout package. Identifiers are never built from input.

const (
	sqlActivePoolNames = `SELECT name FROM riverbus_pool WHERE status = 'active' ORDER BY name`
)

// Horizon.
const (
	// sqlTxSettings is sent in the first round trip of every round and
	// batch.
	//
	// synchronous_commit off: the commit does not wait for its WAL to reach
	// disk. What rounds and batches write is derived state, and every
	// transaction that acts on it durably (a worker's fetch, a later round,
	// a checkpoint) commits synchronously, which flushes the WAL up to and
	// including theirs. A crash can only lose a round or a batch that
	// nothing has acted on, and the next pass redoes it.
	//
	// jit off: on tables not yet analyzed (a fresh database with a backlog)
	// the estimates are high enough for PostgreSQL to JIT-compile these
	// millisecond queries, which took seconds.
	sqlTxSettings = `SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true)`

	// The round's lock: one instance at a time advances the horizon. An
	// EXCLUSIVE table lock on riverbus_horizon_lock (migration 012), which
	// only riverbus_worker may take: an advisory lock could be taken, and
	// held, by any role. Like the advisory lock it replaced, and unlike a
	// row lock, it assigns the transaction no xid, and the proof of a gap
	// needs the round's own xid to be assigned after its snapshot (see
	// horizon.go). (The result is also kept in the setting riverbus.round
	// for the read.)
	sqlHorizonTryLock = `SELECT set_config('riverbus.round', riverbus_horizon_try_lock()::text, true)`

	// One statement, one snapshot: the horizon (NULL when its row is
	// missing), the snapshot itself, the visible sequences above the
	// horizon, the open gaps, the skipped ranges with whether a committed
	// event not yet recorded as late lies in each, the late events not yet
	// retired, and the broken assumptions of the proof (sqlAssumptions,
	// catalog lookups by key). It is sent in the same round trip as the
	// try-lock, and returns no row unless that got the lock: being a later
	// statement, its snapshot is taken with the lock held.
	sqlHorizonRead = `WITH snap AS (SELECT pg_current_snapshot() AS s),
h AS (SELECT (SELECT horizon FROM riverbus_horizon) AS horizon),
a AS MATERIALIZED (` + sqlAssumptions + `)
SELECT h.horizon,
	pg_snapshot_xmax(snap.s)::text,
	ARRAY(SELECT x::text FROM pg_snapshot_xip(snap.s) AS x),
	ARRAY(SELECT e.global_sequence FROM riverbus_event e WHERE e.global_sequence > h.horizon ORDER BY e.global_sequence LIMIT $1),
	ARRAY(SELECT g.first_sequence FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT g.last_sequence FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT g.xid_bound::text FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT extract(epoch FROM clock_timestamp() - g.first_seen_at)::float8 FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT s.first_sequence FROM riverbus_skipped s ORDER BY s.first_sequence),
	ARRAY(SELECT s.last_sequence FROM riverbus_skipped s ORDER BY s.first_sequence),
	ARRAY(SELECT s.xid_bound::text FROM riverbus_skipped s ORDER BY s.first_sequence),
	ARRAY(SELECT EXISTS (SELECT 1 FROM riverbus_event e
			WHERE e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence
				AND NOT EXISTS (SELECT 1 FROM riverbus_late l WHERE l.sequence = e.global_sequence))
		FROM riverbus_skipped s ORDER BY s.first_sequence),
	(SELECT count(*) FROM riverbus_late),
	ARRAY(SELECT a.code FROM a ORDER BY a.code),
	ARRAY(SELECT a.detail FROM a ORDER BY a.code)
FROM snap, h
WHERE current_setting('riverbus.round') = 'true'`

	// sqlAssumptions lists what breaks the gap proof's assumptions (see
	// "What the proof assumes" in horizon.go), one row (code, detail) per
	// problem: the sequence's settings in pg_sequence, its position against
	// the horizon, and the two triggers of riverbus_event. The assign
	// trigger must be the BEFORE INSERT FOR EACH ROW trigger (tgtype 7)
	// calling riverbus_event_assign, enabled (O: fires except for sessions
	// in replica mode, A: always), and the function's body must be the one
	// migration 001 created (assignFunctionMD5).
	sqlAssumptions = `SELECT 'sequence_cache' AS code, format('CACHE %s', q.seqcache) AS detail
	FROM pg_catalog.pg_sequence q WHERE q.seqrelid = 'riverbus_event_global_sequence'::regclass AND q.seqcache <> 1
UNION ALL
SELECT 'sequence_increment', format('INCREMENT BY %s', q.seqincrement)
	FROM pg_catalog.pg_sequence q WHERE q.seqrelid = 'riverbus_event_global_sequence'::regclass AND q.seqincrement <> 1
UNION ALL
SELECT 'sequence_cycle', 'CYCLE'
	FROM pg_catalog.pg_sequence q WHERE q.seqrelid = 'riverbus_event_global_sequence'::regclass AND q.seqcycle
UNION ALL
SELECT 'sequence_below_horizon', format('next number %s, horizon %s', CASE WHEN q.is_called THEN q.last_value + 1 ELSE q.last_value END, r.horizon)
	FROM riverbus_event_global_sequence q, riverbus_horizon r
	WHERE CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END < r.horizon
UNION ALL
SELECT 'assign_trigger_missing', 'no trigger riverbus_event_assign on riverbus_event'
	WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
		WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_assign')
UNION ALL
SELECT 'assign_trigger_disabled', format('tgenabled %s', t.tgenabled)
	FROM pg_catalog.pg_trigger t
	WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_assign' AND t.tgenabled NOT IN ('O', 'A')
UNION ALL
SELECT 'assign_trigger_changed', format('trigger calls %s, type %s', t.tgfoid::regproc, t.tgtype)
	FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
	WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_assign'
		AND (p.proname <> 'riverbus_event_assign' OR t.tgtype <> 7 OR md5(p.prosrc) <> '` + assignFunctionMD5 + `')
UNION ALL
SELECT 'notify_trigger_missing', 'no enabled trigger riverbus_event_notify on riverbus_event'
	WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
		WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_notify' AND t.tgenabled IN ('O', 'A'))`

	// assignFunctionMD5 is md5(prosrc) of riverbus_event_assign as
	// migration 001 creates it. A migration that changes the function
	// changes this constant (TestAssumptionsHoldOnFreshDatabase).
	assignFunctionMD5 = "fb8c21ec5524b5b17d70d51ea9d7e1d6"

	sqlAssumptionsList = `SELECT code, detail FROM (` + sqlAssumptions + `) a ORDER BY code`

	// Of the xids a snapshot lists as running, the ones that may be writers
	// of riverbus_event: all but those whose transaction is seen to run
	// without a RowExclusiveLock on riverbus_event in this database. A
	// writer takes that lock (INSERT, COPY) before the trigger hands it a
	// sequence and keeps it to the end, so a transaction running without it
	// holds no missing sequence.
	//
	// pg_locks is read once (MATERIALIZED): read twice, a writer could be
	// seen running in the first read and, having committed meanwhile,
	// without its lock in the second, and so be left out of the proof while
	// its sequence was not yet visible to the round: the gap was then
	// "proven" dead and a committed event lost (seen in a 5-minute chaos
	// run). And an xid is left out only if it is still in progress after
	// that read: one that ended meanwhile stays listed, and the next round
	// decides.
	sqlPossibleWriters = `WITH l AS MATERIALIZED (
	SELECT locktype, transactionid, relation, database, mode, granted, virtualtransaction FROM pg_locks
),
not_writers AS MATERIALIZED (
	SELECT x FROM unnest($1::text[]) AS x WHERE EXISTS (
		SELECT 1 FROM l t
		WHERE t.locktype = 'transactionid' AND t.granted
			AND t.transactionid::text::bigint = (x::numeric % 4294967296)::bigint
			AND NOT EXISTS (
				SELECT 1 FROM l r
				WHERE r.locktype = 'relation' AND r.mode = 'RowExclusiveLock'
					AND r.relation = 'riverbus_event'::regclass
					AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
					AND r.virtualtransaction = t.virtualtransaction))
)
SELECT x FROM unnest($1::text[]) AS x
WHERE x NOT IN (SELECT n.x FROM not_writers n WHERE pg_xact_status(n.x::xid8) = 'in progress')`

	// The bound of new gaps is the round's own xid, assigned here, by the
	// round's first write, after its snapshot was taken.
	sqlGapInsert = `INSERT INTO riverbus_gap (first_sequence, last_sequence, xid_bound)
SELECT f, l, pg_current_xact_id() FROM unnest($1::bigint[], $2::bigint[]) AS g(f, l)`

	sqlGapDelete = `DELETE FROM riverbus_gap WHERE first_sequence = ANY($1) OR last_sequence <= $2`

	// The round's counters, and what the round skips and finds late, in
	// one statement:
	//
	// sk records the timed-out runs ($4 first, $5 last, $6 bound) as skipped
	// ranges, split around the events committed inside them as this
	// statement sees them (at least every one the round's read saw): those
	// are delivered on the pools' normal path once the horizon has passed
	// them, so they are not late. The cost is one row per run plus one per
	// event inside it, whatever the run's length.
	//
	// lt records as late every committed event inside the ranges $3 (ranges
	// the read found with such events not yet recorded). It runs before the
	// round deletes the ranges it proved (sqlSkippedDelete, a later
	// statement), so no late event is forgotten with its range.
	//
	// The counters saturate rather than overflow: a jump to near 2^63 is a
	// gap of that many sequences.
	sqlHorizonUpdate = `WITH sk AS (
	INSERT INTO riverbus_skipped (first_sequence, last_sequence, xid_bound)
	SELECT s.f, s.l, s.b::xid8 FROM (
		SELECT r.b, lag(v.seq, 1, r.f - 1) OVER (PARTITION BY r.f ORDER BY v.seq) + 1 AS f, v.seq - 1 AS l
		FROM unnest($4::bigint[], $5::bigint[], $6::text[]) AS r(f, l, b)
		CROSS JOIN LATERAL (
			SELECT e.global_sequence AS seq FROM riverbus_event e WHERE e.global_sequence >= r.f AND e.global_sequence <= r.l
			UNION ALL SELECT r.l + 1
		) v
	) s WHERE s.f <= s.l
	ON CONFLICT (first_sequence) DO NOTHING
	RETURNING last_sequence::numeric - first_sequence + 1 AS n
),
lt AS (
	INSERT INTO riverbus_late (sequence)
	SELECT e.global_sequence FROM riverbus_skipped s
	JOIN riverbus_event e ON e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence
	WHERE s.first_sequence = ANY($3::bigint[])
	ON CONFLICT (sequence) DO NOTHING
	RETURNING 1
),
n AS (SELECT coalesce((SELECT sum(n) FROM sk), 0) AS skipped, (SELECT count(*) FROM lt) AS late)
UPDATE riverbus_horizon SET horizon = $1,
	gaps_proven_dead = LEAST(gaps_proven_dead + $2::numeric, 9223372036854775807)::bigint,
	gaps_skipped = LEAST(gaps_skipped + n.skipped, 9223372036854775807)::bigint,
	late_events = late_events + n.late,
	updated_at = now()
FROM n
RETURNING LEAST(n.skipped, 9223372036854775807)::bigint, n.late`

	// Ranges proven: every transaction that could hold one of their
	// sequences has ended.
	sqlSkippedDelete = `DELETE FROM riverbus_skipped WHERE first_sequence = ANY($1)`

	// A late event is retired once every pool that should see it has
	// handled it and no skipped range covers it (a range still watched
	// would find it again and make it late a second time). Its pools'
	// records go with it, and so do records of sequences that are neither
	// late nor covered by a range (a pool's record that lost a race with
	// a retirement).
	sqlSkippedRetire = `WITH r AS (
	DELETE FROM riverbus_late s WHERE NOT EXISTS (
		SELECT 1 FROM riverbus_pool p WHERE p.start_after < s.sequence AND NOT EXISTS (
			SELECT 1 FROM riverbus_pool_late l WHERE l.pool = p.name AND l.sequence = s.sequence))
		AND NOT ` + sqlCoveredBySkipped + `
	RETURNING s.sequence
),
o AS (
	DELETE FROM riverbus_pool_late l
	WHERE l.sequence IN (SELECT r.sequence FROM r)
		OR (NOT EXISTS (SELECT 1 FROM riverbus_late s WHERE s.sequence = l.sequence)
			AND NOT ` + sqlCoveredBySkippedL + `)
)
SELECT count(*) FROM r`

	// Whether a skipped range covers s.sequence (or l.sequence): ranges do
	// not overlap, so the one with the greatest first at or below it is the
	// only candidate, one index probe.
	sqlCoveredBySkipped = `coalesce((SELECT k.last_sequence FROM riverbus_skipped k WHERE k.first_sequence <= s.sequence
			ORDER BY k.first_sequence DESC LIMIT 1) >= s.sequence, false)`
	sqlCoveredBySkippedL = `coalesce((SELECT k.last_sequence FROM riverbus_skipped k WHERE k.first_sequence <= l.sequence
				ORDER BY k.first_sequence DESC LIMIT 1) >= l.sequence, false)`

	sqlHorizonNotify = `SELECT pg_notify('riverbus_horizon', $1::text)`

	// Watching counts the sequences in skipped ranges (committed late ones
	// included) and, separately, the ranges.
	sqlHorizonGet = `SELECT horizon, gaps_proven_dead, gaps_skipped, late_events, updated_at,
	(SELECT count(*) FROM riverbus_gap),
	(SELECT LEAST(coalesce(sum(s.last_sequence::numeric - s.first_sequence + 1), 0), 9223372036854775807)::bigint FROM riverbus_skipped s),
	(SELECT count(*) FROM riverbus_skipped),
	(SELECT count(*) FROM riverbus_late)
FROM riverbus_horizon`

	// The repair of a missing horizon row (RepairHorizon explains the
	// value). ON CONFLICT: an existing row is left alone, whatever a
	// concurrent repair or round did.
	sqlHorizonRepair = `INSERT INTO riverbus_horizon (horizon)
SELECT GREATEST(
	coalesce((SELECT max(last_sequence) FROM riverbus_skipped), 0),
	coalesce((SELECT max(sequence) FROM riverbus_late), 0),
	LEAST(coalesce((SELECT min(cursor_seq) FROM riverbus_pool), 0),
		coalesce((SELECT min(first_sequence) - 1 FROM riverbus_gap), 9223372036854775807)))
ON CONFLICT (id) DO NOTHING
RETURNING horizon`
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

	eventColumns = `e.global_sequence, e.event_id, e.type, e.key, e.tags, e.data, e.metadata, e.occurred_at,
	e.transaction_id::text`

	// Two forms so the type filter can use the (type, global_sequence)
	// index.
	sqlEventsAll = `SELECT ` + eventColumns + ` FROM riverbus_event e
WHERE e.global_sequence > $1 AND e.global_sequence <= $2 AND e.tags @> $3
ORDER BY e.global_sequence LIMIT $4`

	sqlEventsOfTypes = `SELECT ` + eventColumns + ` FROM riverbus_event e
WHERE e.global_sequence > $1 AND e.global_sequence <= $2 AND e.tags @> $3 AND e.type = ANY($5)
ORDER BY e.global_sequence LIMIT $4`

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
	sqlLateEvents = `SELECT ` + eventColumns + ` FROM (
	SELECT l.sequence AS seq FROM riverbus_late l WHERE l.sequence <= $2 AND l.sequence > $3
	UNION
	SELECT e.global_sequence FROM riverbus_skipped s
	JOIN riverbus_event e ON e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence
	WHERE s.first_sequence <= $2 AND s.last_sequence > $3 AND e.global_sequence <= $2 AND e.global_sequence > $3
) c
JOIN riverbus_event e ON e.global_sequence = c.seq
WHERE NOT EXISTS (SELECT 1 FROM riverbus_pool_late pl WHERE pl.pool = $1 AND pl.sequence = c.seq)
ORDER BY c.seq`

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

	// Exclusive locks on the buckets of a batch's lanes, all or none: row
	// locks of riverbus_lane_lock (migration 012), which only
	// riverbus_worker may take. SKIP LOCKED: the batch never waits here; it
	// has them all when it locked as many rows as there are buckets.
	sqlLaneTryLock = `WITH b AS (SELECT DISTINCT riverbus_lane_bucket(l) AS bucket FROM unnest($2::text[]) AS l),
got AS (
	SELECT 1 FROM riverbus_lane_lock ll WHERE ll.pool = $1 AND ll.bucket IN (SELECT bucket FROM b)
	ORDER BY ll.bucket FOR UPDATE OF ll SKIP LOCKED
)
SELECT (SELECT count(*) FROM got) = (SELECT count(*) FROM b)`

	// The same locks, waiting for each in bucket order, the order in which
	// releases take them shared.
	sqlLaneLock = `SELECT count(*) FROM (
	SELECT 1 FROM riverbus_lane_lock ll
	WHERE ll.pool = $1 AND ll.bucket IN (SELECT riverbus_lane_bucket(l) FROM unnest($2::text[]) AS l)
	ORDER BY ll.bucket FOR UPDATE OF ll
) s`

	// Bounds lock waits for the rest of the transaction (or until the
	// savepoint it is set in rolls back); returns the setting it replaced.
	sqlSetLockTimeout = `SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)`

	// Lanes with a job in flight (anything unfinished but pending), or,
	// when the pool blocks on dead letters, with a dead letter. The states
	// are spelled as in the riverbus_job_lane_busy index (migration 005),
	// which holds only in-flight lane jobs.
	sqlBusyLanes = `SELECT DISTINCT metadata->>'riverbus_lane' FROM river_job
WHERE kind = $1 AND metadata ? 'riverbus_lane' AND metadata->>'riverbus_lane' = ANY($2)
	AND state IN ('available', 'running', 'retryable', 'scheduled')
UNION
SELECT lane FROM riverbus_dead_letter WHERE $3 AND pool = $1 AND lane = ANY($2)`

	// Retries of ordered pools' jobs that are due: River's scheduler makes
	// them available only every 5 s, while the job holds its whole key.
	sqlPromoteLaneRetries = `WITH due AS (
	UPDATE river_job SET state = 'available'
	WHERE metadata ? 'riverbus_lane' AND state NOT IN ('cancelled', 'completed', 'discarded')
		AND state IN ('retryable', 'scheduled') AND scheduled_at <= now()
	RETURNING queue
)
SELECT count(*), count(pg_notify(current_schema() || '.river_insert', json_build_object('queue', q)::text))
FROM (SELECT DISTINCT queue AS q FROM due) s`

	// Only lanes that look stuck (pending jobs, none in flight) are handed
	// to riverbus_release_lanes, which checks again under the lanes' locks:
	// taking every busy lane's lock a few times a second held up the
	// fan-out of ordered pools.
	sqlReleaseStuckLanes = `SELECT riverbus_release_lanes(coalesce(array_agg(kind), '{}'), coalesce(array_agg(lane), '{}')) FROM (
	SELECT DISTINCT p.kind, p.metadata->>'riverbus_lane' AS lane FROM river_job p
	WHERE p.metadata ? 'riverbus_lane' AND p.state NOT IN ('cancelled', 'completed', 'discarded') AND p.state = 'pending'
		AND NOT EXISTS (
			SELECT 1 FROM river_job j
			WHERE j.kind = p.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = p.metadata->>'riverbus_lane'
				AND j.state IN ('available', 'running', 'retryable', 'scheduled'))
) s`

	sqlPoolAdvance = `UPDATE riverbus_pool SET cursor_seq = $2, events_fanned_out = events_fanned_out + $3,
	late_events_delivered = late_events_delivered + $4, updated_at = now() WHERE name = $1`
)

// The general path's insert (insert.go).
const (
	// River's insert notification, as River sends it: producers of the
	// queue fetch at once instead of at their next poll.
	sqlNotifyInsert = `SELECT pg_notify(coalesce(current_schema() || '.', '') || 'river_insert', json_build_object('queue', $1::text)::text)`

	// Dead letters of units that cannot become jobs: discarded at once,
	// with the reason as their one error (River's AttemptError shape), so
	// the trigger riverbus_dead_letter_keep_insert keeps them.
	sqlInsertUndeliverable = `INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, state, tags,
	attempt, errors, finalized_at)
SELECT u.a, $1, $2, u.m, $3, $4, 'discarded', '{}', 0,
	ARRAY[jsonb_build_object('at', now(), 'attempt', 0, 'error', u.r, 'trace', '')], now()
FROM unnest($5::jsonb[], $6::jsonb[], $7::text[]) WITH ORDINALITY AS u(a, m, r, i)
ORDER BY u.i`
)
