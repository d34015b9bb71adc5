package lanes

import "github.com/riverbus/riverbus/internal/riversql"

// All SQL of the lanes' Go side. Identifiers are never built from input.

const (
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
SELECT count(*), count(` + riversql.NotifyInsert + `)
FROM (SELECT DISTINCT queue FROM due) s`

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
)
