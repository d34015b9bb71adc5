package checkpoint

// The CASE expression and the partial-index predicate in sqlAdvance are
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
	SELECT p.name, coalesce(pc.checkpoint_seq, p.start_after) AS stored,
		coalesce((
			SELECT min((CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END)) - 1
			FROM river_job
			WHERE kind = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')
		), p.cursor_seq) AS seq
	FROM riverbus_pool p LEFT JOIN riverbus_pool_checkpoint pc ON pc.pool = p.name
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

	sqlPoolNames = `SELECT name FROM riverbus_pool ORDER BY name`

	sqlStatus = `SELECT h.horizon, p.cursor_seq, coalesce(pc.checkpoint_seq, p.start_after)
FROM riverbus_pool p CROSS JOIN riverbus_horizon h LEFT JOIN riverbus_pool_checkpoint pc ON pc.pool = p.name
WHERE p.name = $1`
)
