package pools

// All SQL of the pools package. Identifiers are never built from input.

const poolColumns = `name, queue, event_types, tags, max_attempts, priority, start_after, status,
	ordering, on_dead_letter, grouping, retry_base, retry_factor, retry_max_delay, retry_jitter,
	cursor_seq, coalesce((SELECT c.checkpoint_seq FROM riverbus_pool_checkpoint c WHERE c.pool = name), start_after),
	events_fanned_out, late_events_delivered, created_at, updated_at`

const (
	sqlLastSequence = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM riverbus_event_global_sequence`

	// The end of the log: the last sequence handed out, or the horizon
	// when a setval backwards left the sequence below it (a problem the
	// horizon reports). A pool may start anywhere up to it: every number
	// at or below it was handed out already, so the pool skips only
	// events that exist or are in flight (as --from now does). Above it, a
	// pool would skip the events that get the numbers in between, which
	// nothing reports. The end only rises as events are appended, so a
	// start point found at or below it stays there.
	sqlLogEnd = `greatest((SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM riverbus_event_global_sequence),
	(SELECT horizon FROM riverbus_horizon))`

	// sqlLogEndParts reads what sqlLogEnd is made of, for the error that
	// says where the log ends.
	sqlLogEndParts = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END, coalesce((SELECT horizon FROM riverbus_horizon), 0)
FROM riverbus_event_global_sequence`

	// sqlEventTypesAbsent returns those of the types $1 no event in the log
	// has: one probe of riverbus_event_type_sequence per type, whatever the
	// log's size.
	sqlEventTypesAbsent = `SELECT t FROM unnest($1::text[]) AS t
WHERE NOT EXISTS (SELECT 1 FROM riverbus_event e WHERE e.type = t)
ORDER BY t`

	// The start point ($7) must not be beyond the end of the log (see
	// sqlLogEnd): the insert checks it itself, so a pool is never created
	// above it whatever the caller checked first. Params are cast because
	// the SELECT, unlike VALUES, does not take the columns' types.
	sqlPoolInsert = `INSERT INTO riverbus_pool (name, queue, event_types, tags, max_attempts, priority, start_after, cursor_seq,
	ordering, on_dead_letter, grouping, retry_base, retry_factor, retry_max_delay, retry_jitter)
SELECT $1::text, $2::text, $3::text[], $4::text[], $5::smallint, $6::smallint, $7::bigint, $7::bigint, $8::text, $9::text, $10::text,
	$11::interval, $12::float8, $13::interval, $14::float8
WHERE $7::bigint <= ` + sqlLogEnd + `
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

	// sqlPoolQueueLock locks the River queue row of pool $1, if it has one.
	sqlPoolQueueLock = `SELECT 1 FROM river_queue WHERE name = (SELECT queue FROM riverbus_pool WHERE name = $1) FOR UPDATE`

	sqlPoolsSharingQueue = `SELECT count(*) FROM riverbus_pool WHERE queue = $1 AND name <> $2`

	// A reset beyond the end of the log changes nothing (see sqlLogEnd);
	// the statement that moves the cursor checks it.
	sqlPoolReset = `UPDATE riverbus_pool SET cursor_seq = $2, start_after = LEAST(start_after, $2), updated_at = now()
WHERE name = $1 AND $2 <= ` + sqlLogEnd

	// What a reset starts, read in its transaction after it holds the pool
	// row: the horizon, up to which the pool delivers the events above the
	// reset point again, and the highest River job id. Every job of the
	// replay is inserted by a fan-out batch that locks the pool row after
	// the reset commits, so its id is above every id handed out before:
	// it tells the replay's dead letters from older ones of the same
	// events.
	sqlResetReplay = `SELECT coalesce((SELECT horizon FROM riverbus_horizon), 0), coalesce((SELECT max(id) FROM river_job), 0)`

	// Where a reset to the time $1 goes (ResetReplayToTime): the
	// database's clock as the statement runs (a mark at or before it may
	// commit after this snapshot: an older one is used then, which only
	// re-delivers more); the first event the log keeps and the newest, with
	// when each was appended (as retention and status read it: an event
	// from before migration 019 has no appended_at); the latest horizon
	// mark at or before $1; and the time of the first mark that reaches
	// where the log begins, from which rewinds are exact. Index probes
	// only: retention deletes the marks below the log's start with the
	// events, so the last scan stops at once.
	sqlRewindPoint = `SELECT clock_timestamp(), coalesce(f.seq, 0), f.at, coalesce(l.seq, 0), l.at, m.at, m.committed_through, x.at
FROM riverbus_retention r
LEFT JOIN LATERAL (SELECT e.global_sequence AS seq, coalesce(e.appended_at, LEAST(e.occurred_at, r.appended_at_since)) AS at
	FROM riverbus_event e WHERE e.global_sequence > r.trimmed_through ORDER BY e.global_sequence LIMIT 1) f ON true
LEFT JOIN LATERAL (SELECT e.global_sequence AS seq, coalesce(e.appended_at, LEAST(e.occurred_at, r.appended_at_since)) AS at
	FROM riverbus_event e ORDER BY e.global_sequence DESC LIMIT 1) l ON true
LEFT JOIN LATERAL (SELECT k.at, k.committed_through FROM riverbus_horizon_mark k
	WHERE k.at <= $1 ORDER BY k.at DESC LIMIT 1) m ON true
LEFT JOIN LATERAL (SELECT k.at FROM riverbus_horizon_mark k
	WHERE k.committed_through >= r.trimmed_through ORDER BY k.at LIMIT 1) x ON true`

	sqlCheckpointReset = `INSERT INTO riverbus_pool_checkpoint (pool, checkpoint_seq) VALUES ($1, $2)
ON CONFLICT (pool) DO UPDATE SET checkpoint_seq = EXCLUDED.checkpoint_seq, updated_at = now()`

	sqlPoolUnfinishedJobs = `SELECT count(*) FROM river_job WHERE kind = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')`

	sqlPoolDeleteJobs = `WITH j AS (
	DELETE FROM river_job WHERE kind = $1 AND state NOT IN ('running')
)
DELETE FROM riverbus_dead_letter WHERE pool = $1`

	sqlPoolDelete = `DELETE FROM riverbus_pool WHERE name = $1`
)
