package riverbus

// The SQL of the root package: the status snapshot (Client.Status), read in
// one REPEATABLE READ transaction.

const (
	// The last sequence handed out, the highest one committed (an index
	// probe of the primary key, whatever the table's size), the database's
	// clock, and when the first event in the log was appended (the time
	// retention's keep period runs on, migration 019; an event appended
	// before that migration has none: the earlier of its occurred_at and
	// the migration).
	sqlStatusSequences = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END,
	coalesce((SELECT max(global_sequence) FROM riverbus_event), 0), now(),
	(SELECT coalesce(e.appended_at, LEAST(e.occurred_at, r.appended_at_since)) FROM riverbus_event e, riverbus_retention r
	 ORDER BY e.global_sequence LIMIT 1)
FROM riverbus_event_global_sequence`

	// Only the kinds that are pools: river_job may hold other jobs.
	sqlStatusJobs = `SELECT kind, state::text, count(*) FROM river_job
WHERE kind IN (SELECT name FROM riverbus_pool) GROUP BY kind, state`

	// Per pool: dead letters, the undeliverable ones among them, and the
	// last error of the newest.
	sqlStatusDeadLetters = `SELECT pool, count(*), count(*) FILTER (WHERE args ? 'undeliverable'),
	(SELECT d2.errors->-1->>'error' FROM riverbus_dead_letter d2 WHERE d2.pool = d.pool ORDER BY d2.discarded_at DESC LIMIT 1)
FROM riverbus_dead_letter d GROUP BY pool`

	sqlStatusCompleted = `SELECT kind, count(*) FROM river_job
WHERE kind IN (SELECT name FROM riverbus_pool) AND state = 'completed' AND finalized_at > now() - interval '1 minute'
GROUP BY kind`

	// The processes' reports that have not expired (migration 021), ages
	// by the database's clock.
	sqlStatusProcesses = `SELECT id, name, host, pid, started_at, reported_at,
	extract(epoch FROM now() - reported_at)::float8, extract(epoch FROM report_interval)::float8, fanout, queues
FROM riverbus_process WHERE reported_at > now() - $1::interval
ORDER BY name, started_at, id`

	sqlStatusProcessErrors = `SELECT e.process_id, e.operation, e.subject, e.count, e.since, e.last_at,
	extract(epoch FROM now() - e.last_at)::float8, e.last_error
FROM riverbus_process_error e JOIN riverbus_process p ON p.id = e.process_id
WHERE p.reported_at > now() - $1::interval
ORDER BY e.operation, e.subject, e.process_id`

	// The pools' jobs River shows running that started over $1 ago, per
	// queue (state = 'running' is in River's fetch index).
	sqlStatusRunningStuck = `SELECT kind, queue, count(*) FROM river_job
WHERE state = 'running' AND attempted_at < now() - $1::interval AND kind IN (SELECT name FROM riverbus_pool)
GROUP BY kind, queue`

	// The lowest open gaps and skipped ranges, at most $1 of each.
	sqlStatusGapRanges     = `SELECT first_sequence, last_sequence, first_seen_at FROM riverbus_gap ORDER BY first_sequence LIMIT $1`
	sqlStatusSkippedRanges = `SELECT first_sequence, last_sequence, skipped_at FROM riverbus_skipped ORDER BY first_sequence LIMIT $1`

	// Each pool's checkpoint time: when the newest event at or below its
	// checkpoint (or its start, when higher, as for the lag) was appended,
	// read as sqlStatusLagAge reads it; NULL when retention deleted every
	// such event or there is none. One backward index probe per pool.
	sqlStatusCheckpointTimes = `SELECT p.name, (SELECT coalesce(e.appended_at, LEAST(e.occurred_at, r.appended_at_since))
	FROM riverbus_event e
	WHERE e.global_sequence <= GREATEST(coalesce(c.checkpoint_seq, p.start_after), p.start_after)
		AND e.global_sequence > r.trimmed_through
	ORDER BY e.global_sequence DESC LIMIT 1)
FROM riverbus_pool p LEFT JOIN riverbus_pool_checkpoint c ON c.pool = p.name CROSS JOIN riverbus_retention r`

	// A pool's lag in time: how long ago the first event above its
	// checkpoint ($1) and at or below the horizon ($2) was appended (as
	// sqlStatusSequences reads it), in seconds; NULL when there is none.
	sqlStatusLagAge = `SELECT (SELECT extract(epoch FROM now() - coalesce(e.appended_at, LEAST(e.occurred_at, r.appended_at_since)))::float8
	FROM riverbus_event e, riverbus_retention r
	WHERE e.global_sequence > $1 AND e.global_sequence <= $2
	ORDER BY e.global_sequence LIMIT 1)`
)
