package deadletters

import "github.com/riverbus/riverbus/internal/riversql"

// sqlDeadLetterSelect reads dead letters with the state of their river_job
// row when it still exists, in the columns scanDeadLetter reads.
const sqlDeadLetterSelect = `SELECT d.job_id, d.pool, d.queue, d.global_sequence,
	coalesce(d.args->>'type', ''), coalesce(d.args->>'key', ''), coalesce(d.args->'late' = 'true'::jsonb, false),
	d.attempt, d.max_attempts, d.priority,
	coalesce(d.errors->-1->>'error', ''), d.errors, d.discarded_at,
	j.state::text, d.args
FROM riverbus_dead_letter d
LEFT JOIN river_job j ON j.id = d.job_id`

const (
	// sqlDeadLetterList lists dead letters, with the state of their river_job
	// row when it still exists. $1: pool ('' for all), $2: after job id, $3:
	// limit.
	sqlDeadLetterList = sqlDeadLetterSelect + `
WHERE ($1 = '' OR d.pool = $1) AND d.job_id > $2
ORDER BY d.job_id
LIMIT $3`

	// sqlDeadLetterReplay lists the dead letters of a replay (see
	// pools.Replay) as sqlDeadLetterList does, by sequence: those of pool
	// $1 with a job id above $2 for events in ($3, $4]. $5: limit.
	// sqlDeadLetterReplayCount counts them all. Both read the index on
	// (pool, global_sequence, job_id).
	sqlDeadLetterReplay = sqlDeadLetterSelect + `
WHERE d.pool = $1 AND d.job_id > $2 AND d.global_sequence > $3 AND d.global_sequence <= $4
ORDER BY d.global_sequence, d.job_id
LIMIT $5`

	sqlDeadLetterReplayCount = `SELECT count(*) FROM riverbus_dead_letter
WHERE pool = $1 AND job_id > $2 AND global_sequence > $3 AND global_sequence <= $4`

	// Retry and purge lock river_job rows before riverbus_dead_letter rows,
	// the order of every trigger that writes a dead letter while River
	// updates its job (a discard writes one; a retry from River UI or
	// JobRetry deletes it, migration 009): the other order could deadlock
	// with River UI.
	//
	// sqlJobLockDeadOne and sqlJobLockDeadPool lock the river_job rows of the
	// dead letters to retry or purge, those that still exist, so River's
	// cleaner cannot delete one meanwhile and River UI cannot retry one.
	sqlJobLockDeadOne = `SELECT j.id, j.state::text, j.queue FROM river_job j
WHERE j.id IN (SELECT job_id FROM riverbus_dead_letter WHERE job_id = $1)
ORDER BY j.id FOR UPDATE OF j`

	sqlJobLockDeadPool = `SELECT j.id, j.state::text, j.queue FROM river_job j
WHERE j.id IN (SELECT job_id FROM riverbus_dead_letter WHERE pool = $1)
ORDER BY j.id FOR UPDATE OF j`

	// sqlDeadLetterLockOne and sqlDeadLetterLockPool then lock the dead
	// letters to retry, in the order they are to be worked again.
	sqlDeadLetterLockOne = `SELECT job_id, queue FROM riverbus_dead_letter WHERE job_id = $1 FOR UPDATE`

	sqlDeadLetterLockPool = `SELECT job_id, queue FROM riverbus_dead_letter WHERE pool = $1
ORDER BY global_sequence NULLS LAST, job_id
FOR UPDATE`

	// sqlJobExisting returns which of the given jobs still exist.
	sqlJobExisting = `SELECT coalesce(array_agg(id), '{}') FROM river_job WHERE id = ANY($1::bigint[])`

	// sqlJobReinsert inserts a new available job for each dead letter whose
	// river_job row is gone, with the kind, queue, args, max attempts and
	// priority the dead letter kept. The new job's metadata names the job it
	// replaces.
	sqlJobReinsert = `INSERT INTO river_job (` + riversql.JobColumnList + `, scheduled_at)
SELECT d.args, d.pool, d.max_attempts, d.metadata || jsonb_build_object('riverbus_retry_of', d.job_id), d.priority, d.queue,
	'available', '{}', now() + u.rank * interval '1 microsecond'
FROM unnest($1::bigint[], $2::int[]) AS u(id, rank)
JOIN riverbus_dead_letter d ON d.job_id = u.id
ORDER BY u.rank
RETURNING id, (metadata->>'riverbus_retry_of')::bigint`

	// sqlLanePark puts retried jobs of ordered pools back in line: pending,
	// so that sqlLaneRelease lets each lane's lowest one run once the lane
	// is free, and the lane's order holds through the retry.
	sqlLanePark = `UPDATE river_job SET state = 'pending'
WHERE id = ANY($1::bigint[]) AND metadata ? 'riverbus_lane' AND state = 'available'
RETURNING kind, metadata->>'riverbus_lane'`

	sqlLaneRelease = `SELECT riverbus_release_lanes($1::text[], $2::text[])`

	sqlDeadLetterDeleteMany = `DELETE FROM riverbus_dead_letter WHERE job_id = ANY($1::bigint[])`

	// sqlDeadLetterPurgeOne and sqlDeadLetterPurgePool delete dead letters and
	// their river_job rows that are still discarded (a data-modifying WITH
	// runs whether or not it is referenced), and count the dead letters
	// deleted.
	// They return the pool and lane of each dead letter deleted, so lanes
	// that a dead letter blocked can be released.
	sqlDeadLetterPurgeOne = `WITH dl AS (
	DELETE FROM riverbus_dead_letter WHERE job_id = $1 RETURNING job_id, pool, lane
), jobs AS (
	DELETE FROM river_job j USING dl WHERE j.id = dl.job_id AND j.state = 'discarded' RETURNING j.id
)
SELECT pool, lane FROM dl`

	sqlDeadLetterPurgePool = `WITH dl AS (
	DELETE FROM riverbus_dead_letter WHERE pool = $1 RETURNING job_id, pool, lane
), jobs AS (
	DELETE FROM river_job j USING dl WHERE j.id = dl.job_id AND j.state = 'discarded' RETURNING j.id
)
SELECT pool, lane FROM dl`
)

// Dead letters of units the fan-out could not turn into jobs.
const (
	// sqlDeadLetterStubs reads, of the given dead letters, the stubs: args
	// marked "undeliverable" (bustype.EventJobStub, bustype.GroupJobStub).
	sqlDeadLetterStubs = `SELECT job_id, args FROM riverbus_dead_letter
WHERE job_id = ANY($1::bigint[]) AND args ? 'undeliverable'`

	sqlEventsCount = `SELECT count(*) FROM riverbus_event WHERE global_sequence = ANY($1::bigint[])`

	// sqlDeadLetterRebuild rebuilds the envelope of the dead letter $1 from
	// its stub $2 and the events $3 it names, as the fan-out builds it,
	// keeping what the stub says besides the payload (late, a group's
	// part), and puts it in the dead letter (which a reinsert copies) and
	// in its job row, if it is still there; unless a handler's decoder
	// could not decode it (nested over 10,000 levels, less a level of
	// margin, as migration 007's trigger probes it). It returns whether it
	// was too deep. The payload never leaves the database.
	sqlDeadLetterRebuild = `WITH b AS MATERIALIZED (
	SELECT CASE WHEN $2::jsonb ? 'sequences'
		THEN ($2::jsonb - 'undeliverable' - 'sequences') || jsonb_build_object('events',
			(SELECT jsonb_agg(` + riversql.EventArgs + ` ORDER BY e.global_sequence)
				FROM riverbus_event e WHERE e.global_sequence = ANY ($3::bigint[])))
		ELSE ($2::jsonb - 'undeliverable') || (SELECT ` + riversql.EventArgs + `
				FROM riverbus_event e WHERE e.global_sequence = ($3::bigint[])[1]) END AS args
),
c AS MATERIALIZED (
	SELECT b.args, jsonb_path_exists(b.args, 'lax $.**{9999 to last}') AS deep FROM b
),
d AS (
	UPDATE riverbus_dead_letter SET args = c.args FROM c WHERE job_id = $1 AND NOT c.deep
),
j AS (
	UPDATE river_job SET args = c.args FROM c WHERE id = $1 AND state = 'discarded' AND NOT c.deep
)
SELECT deep FROM c`
)
