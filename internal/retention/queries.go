package retention

// All SQL of the retention package. The rules live in the database
// (migration 015): riverbus_retention_holds says what holds the floor,
// riverbus_retention_step covers (and with apply, deletes) one batch.
const (
	sqlPolicy = `SELECT enabled, extract(epoch FROM keep)::float8, trimmed_through, events_trimmed, last_trimmed_at
FROM riverbus_retention`

	sqlPolicySet = `UPDATE riverbus_retention SET enabled = $1, keep = make_interval(secs => $2::float8), updated_at = now()`

	sqlHolds = `SELECT rule, holder, floor FROM riverbus_retention_holds() ORDER BY floor, rule, holder`

	// $1 from (dry run), $2 now (NULL: the database's), $3 keep in
	// seconds (dry run; NULL: the policy's), $4 batch size, $5 apply.
	sqlStep = `SELECT from_sequence, through_sequence, events, oldest_at, newest_at, floor, stopped_by
FROM riverbus_retention_step($1, $2, CASE WHEN $3::float8 IS NULL THEN NULL ELSE make_interval(secs => $3::float8) END, $4, $5)`

	// Taken by pool create and reset before they read trimmed_through (see
	// migration 015: it conflicts with a retention batch's lock). The table
	// is in the install's private schema (migration 018), which only
	// riverbus_worker and the owner may use: the function names it.
	SQLStartLock = `SELECT riverbus_retention_start_lock()`

	// SQLTrimmedThrough is where the log begins after retention.
	SQLTrimmedThrough = `SELECT trimmed_through FROM riverbus_retention`
)
