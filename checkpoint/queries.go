package checkpoint

// The CASE expression and the partial-index predicate in advanceComputed are
// textually identical to the index riverbus_job_unfinished_sequence in
// migrations/sql/002_fanout.up.sql, so the planner answers min() with one
// index probe. Change them together or not at all.
const (
	// sqlAdvance computes a pool's checkpoint from one snapshot (its cursor
	// and its unfinished jobs are read by the same statement) and stores it
	// when it moves forward, in riverbus_pool_checkpoint, so it never locks
	// the pool row the fan-out locks. It only writes when the value moves; when another transaction moved it further in the
	// meantime, the higher value is kept. It returns the checkpoint, or no row
	// for an unknown pool.
	sqlAdvance = `WITH computed AS (
	SELECT ` + advanceComputed + `
	WHERE p.name = $1
),
moved AS (
	INSERT INTO riverbus_pool_checkpoint AS pc (pool, checkpoint_seq)
	SELECT c.name, c.seq FROM computed c WHERE c.seq > c.stored
	ON CONFLICT (pool) DO UPDATE
	SET checkpoint_seq = GREATEST(pc.checkpoint_seq, EXCLUDED.checkpoint_seq), updated_at = now()
	RETURNING pc.checkpoint_seq
)
SELECT coalesce((SELECT checkpoint_seq FROM moved), GREATEST(c.stored, c.seq))
FROM computed c`

	// advanceComputed is, per pool (p) and from the statement's snapshot,
	// its stored checkpoint and the one its cursor and unfinished jobs
	// give: one probe of the index per pool.
	advanceComputed = `p.name, coalesce(pc.checkpoint_seq, p.start_after) AS stored,
		coalesce((
			SELECT min((CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END)) - 1
			FROM river_job
			WHERE kind = p.name AND state NOT IN ('cancelled', 'completed', 'discarded')
		), p.cursor_seq) AS seq
	FROM riverbus_pool p LEFT JOIN riverbus_pool_checkpoint pc ON pc.pool = p.name`

	// sqlAdvanceAll is sqlAdvance for every pool at once, in one statement
	// whatever the number of pools: the advancer runs it every
	// CheckpointInterval, and one statement per pool made an idle
	// fan-out's cost grow with its pools. It writes only the checkpoints
	// that move, in name order, and skips a pool being deleted (its row
	// locked FOR UPDATE) rather than waiting for it and failing on the
	// foreign key. Rows: each pool's name and checkpoint.
	sqlAdvanceAll = `WITH computed AS MATERIALIZED (
	SELECT ` + advanceComputed + `
),
lk AS (
	SELECT c.name, c.seq FROM computed c JOIN riverbus_pool p ON p.name = c.name
	WHERE c.seq > c.stored
	ORDER BY c.name
	FOR KEY SHARE OF p SKIP LOCKED
),
moved AS (
	INSERT INTO riverbus_pool_checkpoint AS pc (pool, checkpoint_seq)
	SELECT name, seq FROM lk ORDER BY name
	ON CONFLICT (pool) DO UPDATE
	SET checkpoint_seq = GREATEST(pc.checkpoint_seq, EXCLUDED.checkpoint_seq), updated_at = now()
	RETURNING pc.pool, pc.checkpoint_seq
)
SELECT c.name, coalesce(m.checkpoint_seq, GREATEST(c.stored, c.seq))
FROM computed c LEFT JOIN moved m ON m.pool = c.name`

	sqlStatus = `SELECT h.horizon, p.cursor_seq, coalesce(pc.checkpoint_seq, p.start_after)
FROM riverbus_pool p CROSS JOIN riverbus_horizon h LEFT JOIN riverbus_pool_checkpoint pc ON pc.pool = p.name
WHERE p.name = $1`
)

// The ORDER BY expression of sqlHolder is the index's expression too (see
// above): with kind = $1 and the index's predicate, the lowest unfinished
// sequence of a pool is the first entry of an index scan.
const (
	// sqlHolder returns one row for a known pool: when its checkpoint last
	// moved, the database's clock, and its unfinished job of the lowest
	// sequence (all NULL when it has none).
	sqlHolder = `SELECT coalesce(pc.updated_at, p.created_at), now(),
	h.id, h.seq, h.state, h.attempt, h.max_attempts, h.scheduled_at, h.created_at, h.last_error, h.lane
FROM riverbus_pool p
LEFT JOIN riverbus_pool_checkpoint pc ON pc.pool = p.name
LEFT JOIN LATERAL (
	SELECT id, (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END) AS seq,
		state::text AS state, attempt, max_attempts, scheduled_at, created_at,
		coalesce(errors[cardinality(errors)]->>'error', '') AS last_error, metadata->>'riverbus_lane' AS lane
	FROM river_job
	WHERE kind = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')
		AND (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END) IS NOT NULL
	ORDER BY (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END)
	LIMIT 1
) h ON true
WHERE p.name = $1`

	// sqlLaneBlocker returns what a lane ($2) of an ordered pool ($1) waits
	// for: its job in flight (the rules of migration 005), else, in a pool
	// that blocks on dead letters, its lowest dead letter. No row: nothing.
	sqlLaneBlocker = `SELECT id, seq, state, attempt, max_attempts, scheduled_at, discarded_at, last_error, dead FROM (
	(SELECT 0 AS rank, id, (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END) AS seq,
		state::text AS state, attempt, max_attempts, scheduled_at, NULL::timestamptz AS discarded_at,
		coalesce(errors[cardinality(errors)]->>'error', '') AS last_error, false AS dead
	FROM river_job
	WHERE kind = $1 AND metadata ? 'riverbus_lane' AND metadata->>'riverbus_lane' = $2
		AND state IN ('available', 'running', 'retryable', 'scheduled')
	ORDER BY 3, id LIMIT 1)
	UNION ALL
	(SELECT 1, d.job_id, d.global_sequence, 'discarded', d.attempt, d.max_attempts, NULL, d.discarded_at,
		coalesce(d.errors->-1->>'error', ''), true
	FROM riverbus_dead_letter d JOIN riverbus_pool p ON p.name = d.pool
	WHERE d.pool = $1 AND d.lane = $2 AND p.on_dead_letter = 'block'
	ORDER BY d.global_sequence, d.job_id LIMIT 1)
) b ORDER BY rank LIMIT 1`
)
