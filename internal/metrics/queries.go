package metrics

// All SQL of the metrics package. Each scrape runs them in one read-only
// REPEATABLE READ transaction, so they see one snapshot.

const (
	sqlHorizon = `SELECT horizon, gaps_proven_dead, gaps_skipped, late_events,
	(SELECT count(*) FROM riverbus_gap),
	(SELECT LEAST(coalesce(sum(s.last_sequence::numeric - s.first_sequence + 1), 0), 9223372036854775807)::bigint FROM riverbus_skipped s)
FROM riverbus_horizon`

	// No riverbus_pool_checkpoint row yet: the checkpoint is start_after.
	sqlPools = `SELECT p.name, p.cursor_seq, coalesce(c.checkpoint_seq, p.start_after),
	p.events_fanned_out, p.late_events_delivered, p.status = 'paused',
	(SELECT count(*) FROM riverbus_dead_letter d WHERE d.pool = p.name),
	(SELECT count(*) FROM riverbus_dead_letter d WHERE d.pool = p.name AND d.args ? 'undeliverable')
FROM riverbus_pool p LEFT JOIN riverbus_pool_checkpoint c ON c.pool = p.name
ORDER BY p.name`

	// Only the kinds that are pools: river_job may hold other jobs.
	sqlPoolJobs = `SELECT j.kind, j.state::text, count(*)
FROM river_job j
WHERE j.kind IN (SELECT name FROM riverbus_pool)
GROUP BY j.kind, j.state`
)
