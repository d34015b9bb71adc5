package fanout

// All SQL of the fanout package. Identifiers are never built from input.

const poolColumns = `name, queue, event_types, tags, max_attempts, priority, start_after, status,
	ordering, on_dead_letter, grouping,
	cursor_seq, coalesce((SELECT c.checkpoint_seq FROM riverbus_pool_checkpoint c WHERE c.pool = name), start_after),
	events_fanned_out, late_events_delivered, created_at, updated_at`

const (
	sqlLastSequence = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM riverbus_event_global_sequence`

	sqlPoolInsert = `INSERT INTO riverbus_pool (name, queue, event_types, tags, max_attempts, priority, start_after, cursor_seq,
	ordering, on_dead_letter, grouping)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10)
ON CONFLICT (name) DO NOTHING
RETURNING ` + poolColumns

	sqlPoolGet          = `SELECT ` + poolColumns + ` FROM riverbus_pool WHERE name = $1`
	sqlPoolGetForUpdate = sqlPoolGet + ` FOR NO KEY UPDATE`
	sqlPoolList         = `SELECT ` + poolColumns + ` FROM riverbus_pool ORDER BY name`

	sqlPoolUpdate = `UPDATE riverbus_pool SET queue = $2, event_types = $3, tags = $4, max_attempts = $5, priority = $6,
	ordering = $7, on_dead_letter = $8, grouping = $9, updated_at = now()
WHERE name = $1 RETURNING ` + poolColumns

	sqlPoolSetStatus = `UPDATE riverbus_pool SET status = $2, updated_at = now() WHERE name = $1 RETURNING ` + poolColumns

	sqlPoolsSharingQueue = `SELECT count(*) FROM riverbus_pool WHERE queue = $1 AND name <> $2`

	sqlRiverQueueEnsure = `INSERT INTO river_queue (name, created_at, metadata, updated_at) VALUES ($1, now(), '{}', now())
ON CONFLICT (name) DO NOTHING`

	sqlPoolReset = `UPDATE riverbus_pool SET cursor_seq = $2, start_after = LEAST(start_after, $2), updated_at = now() WHERE name = $1`

	sqlCheckpointReset = `INSERT INTO riverbus_pool_checkpoint (pool, checkpoint_seq) VALUES ($1, $2)
ON CONFLICT (pool) DO UPDATE SET checkpoint_seq = EXCLUDED.checkpoint_seq, updated_at = now()`

	sqlPoolUnfinishedJobs = `SELECT count(*) FROM river_job WHERE kind = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')`

	sqlPoolDeleteJobs = `WITH j AS (
	DELETE FROM river_job WHERE kind = $1 AND state NOT IN ('running')
)
DELETE FROM riverbus_dead_letter WHERE pool = $1`

	sqlPoolDelete = `DELETE FROM riverbus_pool WHERE name = $1`

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

	// horizonLock is the transaction-scoped advisory lock ("rbus", "hori")
	// that makes one instance at a time advance the horizon. It is an
	// advisory lock rather than a row lock because a row lock assigns the
	// transaction an xid, and the proof of a gap needs the round's own xid
	// to be assigned after its snapshot (see horizon.go).
	// (The result is also kept in the setting riverbus.round for the read.)
	sqlHorizonTryLock = `SELECT set_config('riverbus.round', pg_try_advisory_xact_lock(1919054195, 1752134249)::text, true)`

	// One statement, one snapshot: the horizon, the snapshot itself, the
	// visible sequences above the horizon, the open gaps and which skipped
	// sequences are visible now. It is sent in the same round trip as the
	// try-lock, and returns no row unless that got the lock: being a later
	// statement, its snapshot is taken with the lock held.
	sqlHorizonRead = `WITH snap AS (SELECT pg_current_snapshot() AS s),
h AS (SELECT horizon FROM riverbus_horizon)
SELECT h.horizon,
	pg_snapshot_xmax(snap.s)::text,
	ARRAY(SELECT x::text FROM pg_snapshot_xip(snap.s) AS x),
	ARRAY(SELECT e.global_sequence FROM riverbus_event e WHERE e.global_sequence > h.horizon ORDER BY e.global_sequence LIMIT $1),
	ARRAY(SELECT g.first_sequence FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT g.last_sequence FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT g.xid_bound::text FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT extract(epoch FROM clock_timestamp() - g.first_seen_at)::float8 FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT s.sequence FROM riverbus_skipped s WHERE s.late_at IS NULL ORDER BY s.sequence),
	ARRAY(SELECT s.xid_bound::text FROM riverbus_skipped s WHERE s.late_at IS NULL ORDER BY s.sequence),
	ARRAY(SELECT EXISTS (SELECT 1 FROM riverbus_event e WHERE e.global_sequence = s.sequence)
		FROM riverbus_skipped s WHERE s.late_at IS NULL ORDER BY s.sequence),
	(SELECT count(*) FROM riverbus_skipped s WHERE s.late_at IS NOT NULL)
FROM snap, h
WHERE current_setting('riverbus.round') = 'true'`

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

	sqlSkippedInsert = `INSERT INTO riverbus_skipped (sequence, xid_bound)
SELECT s, $2::text::xid8 FROM unnest($1::bigint[]) AS s ON CONFLICT (sequence) DO NOTHING`

	sqlSkippedMarkLate = `UPDATE riverbus_skipped SET late_at = now() WHERE sequence = ANY($1) AND late_at IS NULL`

	sqlSkippedDelete = `DELETE FROM riverbus_skipped WHERE sequence = ANY($1)`

	// A late event is retired once every pool that should see it has
	// handled it.
	sqlSkippedRetire = `DELETE FROM riverbus_skipped s WHERE s.late_at IS NOT NULL AND NOT EXISTS (
	SELECT 1 FROM riverbus_pool p WHERE p.start_after < s.sequence AND NOT EXISTS (
		SELECT 1 FROM riverbus_pool_late l WHERE l.pool = p.name AND l.sequence = s.sequence))`

	sqlHorizonUpdate = `UPDATE riverbus_horizon SET horizon = $1,
	gaps_proven_dead = gaps_proven_dead + $2, gaps_skipped = gaps_skipped + $3, late_events = late_events + $4,
	updated_at = now()`

	sqlHorizonNotify = `SELECT pg_notify('riverbus_horizon', $1::text)`

	sqlHorizonGet = `SELECT horizon, gaps_proven_dead, gaps_skipped, late_events, updated_at,
	(SELECT count(*) FROM riverbus_gap), (SELECT count(*) FROM riverbus_skipped WHERE late_at IS NULL)
FROM riverbus_horizon`
)

// Fan-out.
const (
	sqlPoolLock = `SELECT queue, event_types, tags, max_attempts, priority, start_after, cursor_seq,
	ordering, on_dead_letter, grouping
FROM riverbus_pool WHERE name = $1 AND status = 'active' FOR NO KEY UPDATE SKIP LOCKED`

	sqlHorizonAndSkipped = `SELECT horizon, EXISTS (SELECT 1 FROM riverbus_skipped) FROM riverbus_horizon`

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

	// Skipped sequences that the normal path just read (and delivered):
	// recorded so the late path does not deliver them again. Skipped
	// sequences it did not read (filtered out, or committed after the read)
	// are left to the late path, which records them when it handles them.
	sqlPoolLateRecordRange = `INSERT INTO riverbus_pool_late (pool, sequence)
SELECT $1, s.sequence FROM riverbus_skipped s
WHERE s.sequence = ANY($2::bigint[])
ON CONFLICT DO NOTHING`

	// Late events for a pool: skipped sequences at or below its cursor that
	// are visible now and that the pool has not handled.
	sqlLateEvents = `SELECT ` + eventColumns + ` FROM riverbus_skipped s
JOIN riverbus_event e ON e.global_sequence = s.sequence
WHERE s.sequence <= $2 AND s.sequence > $3
	AND NOT EXISTS (SELECT 1 FROM riverbus_pool_late l WHERE l.pool = $1 AND l.sequence = s.sequence)
ORDER BY s.sequence`

	sqlPoolLateRecord = `INSERT INTO riverbus_pool_late (pool, sequence)
SELECT $1, s FROM unnest($2::bigint[]) AS s ON CONFLICT DO NOTHING`

	// Every matching event of the given transactions, for grouped pools.
	sqlTransactionEvents = `SELECT ` + eventColumns + ` FROM riverbus_event e
WHERE e.transaction_id = ANY($1::text[]::xid8[]) AND e.tags @> $2
ORDER BY e.global_sequence`

	sqlTransactionEventsOfTypes = `SELECT ` + eventColumns + ` FROM riverbus_event e
WHERE e.transaction_id = ANY($1::text[]::xid8[]) AND e.tags @> $2 AND e.type = ANY($3)
ORDER BY e.global_sequence`

	// Exclusive locks on the buckets of a batch's lanes, all or none
	// (try-locks: the batch never waits while holding one).
	sqlLaneTryLock = `SELECT coalesce(bool_and(pg_try_advisory_xact_lock(riverbus_lane_lock_class($1), b)), true)
FROM (SELECT DISTINCT riverbus_lane_bucket(l) AS b FROM unnest($2::text[]) AS l) s`

	// The same locks, waiting for each in bucket order, the order in which
	// releases take them shared.
	sqlLaneLock = `SELECT count(pg_advisory_xact_lock(riverbus_lane_lock_class($1), b))
FROM (SELECT DISTINCT riverbus_lane_bucket(l) AS b FROM unnest($2::text[]) AS l ORDER BY 1) s`

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
