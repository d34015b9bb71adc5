package pools

// All SQL of the pools package. Identifiers are never built from input.

const poolColumns = `name, queue, event_types, tags, max_attempts, priority, start_after, status,
	ordering, on_dead_letter, grouping, retry_base, retry_factor, retry_max_delay, retry_jitter,
	cursor_seq, coalesce((SELECT c.checkpoint_seq FROM riverbus_pool_checkpoint c WHERE c.pool = name), start_after),
	events_fanned_out, late_events_delivered, created_at, updated_at`

const (
	sqlLastSequence = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM riverbus_event_global_sequence`

	sqlPoolInsert = `INSERT INTO riverbus_pool (name, queue, event_types, tags, max_attempts, priority, start_after, cursor_seq,
	ordering, on_dead_letter, grouping, retry_base, retry_factor, retry_max_delay, retry_jitter)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (name) DO NOTHING
RETURNING ` + poolColumns

	sqlPoolGet          = `SELECT ` + poolColumns + ` FROM riverbus_pool WHERE name = $1`
	sqlPoolGetForUpdate = sqlPoolGet + ` FOR NO KEY UPDATE`
	sqlPoolList         = `SELECT ` + poolColumns + ` FROM riverbus_pool ORDER BY name`

	sqlPoolUpdate = `UPDATE riverbus_pool SET queue = $2, event_types = $3, tags = $4, max_attempts = $5, priority = $6,
	ordering = $7, on_dead_letter = $8, grouping = $9,
	retry_base = $10, retry_factor = $11, retry_max_delay = $12, retry_jitter = $13, updated_at = now()
WHERE name = $1 RETURNING ` + poolColumns

	// Where the pool's delivery (re)starts, for transaction groups
	// (group.go): $2 on create and reset. On an update that changes what
	// the pool receives (filter, ordering, grouping), $2 is NULL: the
	// cursor. The rest of a transaction the cursor is inside is then
	// delivered as a new group, even if a group of the old settings held
	// some of it: the old settings' answer to "was this group delivered?"
	// could skip events the old group never held.
	sqlPoolStartSet = `INSERT INTO riverbus_pool_start (pool, group_floor)
SELECT name, coalesce($2, cursor_seq) FROM riverbus_pool WHERE name = $1
ON CONFLICT (pool) DO UPDATE SET group_floor = EXCLUDED.group_floor, updated_at = now()`

	sqlPoolSetStatus = `UPDATE riverbus_pool SET status = $2, updated_at = now() WHERE name = $1 RETURNING ` + poolColumns

	sqlPoolsSharingQueue = `SELECT count(*) FROM riverbus_pool WHERE queue = $1 AND name <> $2`

	sqlPoolReset = `UPDATE riverbus_pool SET cursor_seq = $2, start_after = LEAST(start_after, $2), updated_at = now() WHERE name = $1`

	sqlCheckpointReset = `INSERT INTO riverbus_pool_checkpoint (pool, checkpoint_seq) VALUES ($1, $2)
ON CONFLICT (pool) DO UPDATE SET checkpoint_seq = EXCLUDED.checkpoint_seq, updated_at = now()`

	sqlPoolUnfinishedJobs = `SELECT count(*) FROM river_job WHERE kind = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')`

	sqlPoolDeleteJobs = `WITH j AS (
	DELETE FROM river_job WHERE kind = $1 AND state NOT IN ('running')
)
DELETE FROM riverbus_dead_letter WHERE pool = $1`

	sqlPoolDelete = `DELETE FROM riverbus_pool WHERE name = $1`
)
