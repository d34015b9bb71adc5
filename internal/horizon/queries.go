package horizon

// The SQL of the horizon's facts: the proof's assumptions, the failover
// fence, the horizon row, its repairs. The round's own SQL is in package
// fanout (roundqueries.go). Identifiers are never built from input.

const (
	// SQLAssumptions (the round reads it with its snapshot) lists what breaks the gap proof's assumptions (see
	// "What the proof assumes" in doc.go), one row (code, detail) per
	// problem: the sequence's settings in pg_sequence, its position against
	// the horizon, and the two triggers of riverbus_event. The assign
	// trigger must be the BEFORE INSERT FOR EACH ROW trigger (tgtype 7)
	// calling riverbus_event_assign, enabled (O: fires except for sessions
	// in replica mode, A: always), and the function's body must be the one
	// migration 001 created (assignFunctionMD5).
	//
	// event_above_sequence: events numbered above the sequence's last value
	// (read after the statement's snapshot, so no event that got its number
	// from the sequence is counted). Not while the sequence is below the
	// horizon: events above it are then those of a setval backwards, and
	// sequence_below_horizon says so. One probe of the primary key: there
	// are none.
	SQLAssumptions = `SELECT 'event_above_sequence' AS code,
	format('%s event(s) numbered %s to %s, above the sequence''s last value %s', count(*), min(e.global_sequence),
		max(e.global_sequence), min(q.last)) AS detail
	FROM (` + SQLSequenceLast + `) q(last), riverbus_horizon r, riverbus_event e
	WHERE q.last >= r.horizon AND e.global_sequence > q.last
	HAVING count(*) > 0
UNION ALL
SELECT 'sequence_cache', format('CACHE %s', q.seqcache)
	FROM pg_catalog.pg_sequence q WHERE q.seqrelid = 'riverbus_event_global_sequence'::regclass AND q.seqcache <> 1
UNION ALL
SELECT 'sequence_increment', format('INCREMENT BY %s', q.seqincrement)
	FROM pg_catalog.pg_sequence q WHERE q.seqrelid = 'riverbus_event_global_sequence'::regclass AND q.seqincrement <> 1
UNION ALL
SELECT 'sequence_cycle', 'CYCLE'
	FROM pg_catalog.pg_sequence q WHERE q.seqrelid = 'riverbus_event_global_sequence'::regclass AND q.seqcycle
UNION ALL
SELECT 'sequence_below_horizon', format('next number %s, horizon %s', CASE WHEN q.is_called THEN q.last_value + 1 ELSE q.last_value END, r.horizon)
	FROM riverbus_event_global_sequence q, riverbus_horizon r
	WHERE CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END < r.horizon
UNION ALL
SELECT 'assign_trigger_missing', 'no trigger riverbus_event_assign on riverbus_event'
	WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
		WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_assign')
UNION ALL
SELECT 'assign_trigger_disabled', format('tgenabled %s', t.tgenabled)
	FROM pg_catalog.pg_trigger t
	WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_assign' AND t.tgenabled NOT IN ('O', 'A')
UNION ALL
SELECT 'assign_trigger_changed', format('trigger calls %s, type %s', t.tgfoid::regproc, t.tgtype)
	FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
		JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
	WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_assign'
		AND (p.proname <> 'riverbus_event_assign' OR t.tgtype <> 7 OR p.proconfig IS NOT NULL
			OR md5(replace(p.prosrc, quote_literal(format('%I.riverbus_event_global_sequence', n.nspname)),
				'''riverbus_event_global_sequence''')) <> '` + assignFunctionMD5 + `')
UNION ALL
SELECT 'notify_trigger_missing', 'no enabled trigger riverbus_event_notify on riverbus_event'
	WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
		WHERE t.tgrelid = 'riverbus_event'::regclass AND t.tgname = 'riverbus_event_notify' AND t.tgenabled IN ('O', 'A'))`

	// assignFunctionMD5 is md5(prosrc) of riverbus_event_assign as
	// migration 017 creates it, with the sequence's name, which 017
	// qualifies with the schema riverbus was installed in, written
	// unqualified: the same in every schema. A migration that changes the
	// function changes this constant (TestAssumptionsHoldOnFreshDatabase).
	// The function has no SET clause (017 says why); one there is a change
	// too.
	assignFunctionMD5 = "5aa57c9006cfe99fab3bcc42f53e85e9"

	// SQLSequenceLast (the round reads it too) is the last number riverbus_event_global_sequence
	// handed out (0 before the first).
	SQLSequenceLast = `SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END FROM riverbus_event_global_sequence q`

	sqlAssumptionsList = `SELECT code, detail FROM (` + SQLAssumptions + `) a ORDER BY code`

	// The failover fence (migration 020), and the latest one it recorded.
	sqlFailoverFence = `SELECT id, fenced_at, old_timeline, new_timeline, old_system_identifier, new_system_identifier,
	horizon_before, horizon_after, sequence_before, events_renumbered, job_id_before, job_id_after, jobs_rescued
FROM riverbus_failover_fence()`
	sqlLastFailover = `SELECT id, fenced_at, old_timeline, new_timeline, old_system_identifier, new_system_identifier,
	horizon_before, horizon_after, sequence_before, events_renumbered, job_id_before, job_id_after, jobs_rescued
FROM riverbus_failover ORDER BY id DESC LIMIT 1`

	// Watching counts the sequences in skipped ranges (committed late ones
	// included) and, separately, the ranges.
	sqlHorizonGet = `SELECT horizon, gaps_proven_dead, gaps_skipped, late_events, updated_at,
	(SELECT count(*) FROM riverbus_gap),
	(SELECT LEAST(coalesce(sum(s.last_sequence::numeric - s.first_sequence + 1), 0), 9223372036854775807)::bigint FROM riverbus_skipped s),
	(SELECT count(*) FROM riverbus_skipped),
	(SELECT count(*) FROM riverbus_late),
	(SELECT count(*) FROM riverbus_failover)
FROM riverbus_horizon`

	// The repair of events numbered above the sequence (migration 017's
	// function, which runs in a transaction of its own).
	sqlRenumber = `SELECT old_sequence, new_sequence FROM riverbus_event_renumber()`

	// The repair of a missing horizon row (RepairHorizon explains the
	// value). ON CONFLICT: an existing row is left alone, whatever a
	// concurrent repair or round did.
	sqlHorizonRepair = `INSERT INTO riverbus_horizon (horizon)
SELECT GREATEST(
	coalesce((SELECT max(last_sequence) FROM riverbus_skipped), 0),
	coalesce((SELECT max(sequence) FROM riverbus_late), 0),
	coalesce((SELECT trimmed_through FROM riverbus_retention), 0),
	LEAST(coalesce((SELECT min(cursor_seq) FROM riverbus_pool), 0),
		coalesce((SELECT min(first_sequence) - 1 FROM riverbus_gap), 9223372036854775807)))
ON CONFLICT (id) DO NOTHING
RETURNING horizon`
)
