package fanout

import "github.com/riverbus/riverbus/internal/horizon"

// The SQL of the horizon round (round.go, horizonservice.go); the SQL of
// the horizon's facts (assumptions, failover, repair) is internal/horizon's.
// Identifiers are never built from input.

const (
	// The round's lock: one instance at a time advances the horizon. An
	// EXCLUSIVE table lock on riverbus_horizon_lock (migration 012), in the
	// install's private schema (migration 018), which only riverbus_worker
	// may take or even name: an advisory lock could be taken, and held, by
	// any role, and so could a table's lock at parse time wherever PUBLIC
	// may name the table. Like the advisory lock it replaced, and unlike a
	// row lock, it assigns the transaction no xid, and the proof of a gap
	// needs the round's own xid to be assigned after its snapshot (see
	// internal/horizon/doc.go). (The result is also kept in the setting riverbus.round for
	// the read.)
	sqlHorizonTryLock = `SELECT set_config('riverbus.round', riverbus_horizon_try_lock()::text, true)`

	// Who holds the round's lock (migration 018).
	sqlHorizonLockHolders = `SELECT pid, role, application_name, state, state_for FROM riverbus_horizon_lock_holders()`

	// One statement, one snapshot: the horizon (NULL when its row is
	// missing), the snapshot itself, the visible sequences above the
	// horizon, the open gaps, the skipped ranges with whether a committed
	// event not yet recorded as late lies in each, the late events not yet
	// retired, and the broken assumptions of the proof (horizon.SQLAssumptions,
	// catalog lookups by key). It is sent in the same round trip as the
	// try-lock, and returns no row unless that got the lock: being a later
	// statement, its snapshot is taken with the lock held.
	//
	// The visible sequences stop at the sequence's last value, read after
	// the snapshot (a later read in the same statement): every event that
	// got its number from the sequence is at or below it, and an event
	// above it did not (ProblemEventAboveSequence), so the horizon neither
	// passes it nor treats the numbers below it as a gap it could prove.
	sqlHorizonRead = `WITH snap AS (SELECT pg_current_snapshot() AS s),
h AS (SELECT (SELECT horizon FROM riverbus_horizon) AS horizon),
a AS MATERIALIZED (` + horizon.SQLAssumptions + `)
SELECT h.horizon,
	pg_snapshot_xmax(snap.s)::text,
	ARRAY(SELECT x::text FROM pg_snapshot_xip(snap.s) AS x),
	ARRAY(SELECT e.global_sequence FROM riverbus_event e
		WHERE e.global_sequence > h.horizon AND e.global_sequence <= (` + horizon.SQLSequenceLast + `)
		ORDER BY e.global_sequence LIMIT $1),
	ARRAY(SELECT g.first_sequence FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT g.last_sequence FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT g.xid_bound::text FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT extract(epoch FROM clock_timestamp() + $2::float8 * interval '1 second' - g.first_seen_at)::float8
		FROM riverbus_gap g ORDER BY g.first_sequence),
	ARRAY(SELECT s.first_sequence FROM riverbus_skipped s ORDER BY s.first_sequence),
	ARRAY(SELECT s.last_sequence FROM riverbus_skipped s ORDER BY s.first_sequence),
	ARRAY(SELECT s.xid_bound::text FROM riverbus_skipped s ORDER BY s.first_sequence),
	ARRAY(SELECT EXISTS (SELECT 1 FROM riverbus_event e
			WHERE e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence
				AND NOT EXISTS (SELECT 1 FROM riverbus_late l WHERE l.sequence = e.global_sequence))
		FROM riverbus_skipped s ORDER BY s.first_sequence),
	(SELECT count(*) FROM riverbus_late),
	ARRAY(SELECT a.code FROM a ORDER BY a.code),
	ARRAY(SELECT a.detail FROM a ORDER BY a.code)
FROM snap, h
WHERE current_setting('riverbus.round') = 'true'`

	// sqlHorizonFast is the fast round's move, sent after the read in the
	// round trip that also commits it: the horizon passes the run of
	// sequences just above it that this statement sees committed without
	// a hole ($1 at most), which needs no proof (docs/design.md §2), unless
	// the round did not get the lock or the sequence is below the horizon
	// (sequence_below_horizon, which freezes the horizon). Like the read,
	// it stops at the sequence's last value (event_above_sequence). The gap
	// rows the run passes go. It returns the new horizon, or no row when
	// it did not move.
	sqlHorizonFast = `WITH h AS (
	SELECT r.horizon, q.last FROM riverbus_horizon r, (` + horizon.SQLSequenceLast + `) q(last)
	WHERE current_setting('riverbus.round') = 'true' AND q.last >= r.horizon
),
run AS (
	SELECT max(e.s) AS top FROM h, LATERAL (
		SELECT v.global_sequence AS s, row_number() OVER (ORDER BY v.global_sequence) AS n
		FROM riverbus_event v WHERE v.global_sequence > h.horizon AND v.global_sequence <= h.last
		ORDER BY v.global_sequence LIMIT $1
	) e WHERE e.s = h.horizon + e.n
),
d AS (DELETE FROM riverbus_gap WHERE last_sequence <= (SELECT run.top FROM run)),
mv AS (SELECT run.top, NULL::bigint AS new_skip, $2::float8 AS every, $3::bigint AS cap FROM run, h WHERE run.top > h.horizon),
` + sqlHorizonMark + `
UPDATE riverbus_horizon r SET horizon = run.top, updated_at = now()
FROM run, h WHERE run.top > h.horizon
RETURNING run.top`

	// sqlHorizonMark is the part of the statements that move the horizon
	// (sqlHorizonFast, sqlHorizonUpdate) that records when events committed
	// by, for rewinds to a time (docs/design.md §11). Each statement defines
	// mv first: one row when it moves the horizon, with top the new
	// horizon, new_skip the first sequence of the ranges it skips (NULL:
	// none), every the mark interval in seconds and cap the most marks
	// kept; no row when it does not move it.
	//
	// The mark's time is clock_timestamp(), read while this statement runs:
	// after the snapshot the new horizon was found in (this statement's,
	// or the round's read, an earlier statement), so every event at or
	// below committed_through had committed before it. committed_through
	// is the new horizon, lowered below every skipped range, old or new: a
	// sequence in one may still commit, and it would do so after the mark.
	//
	// A mark is written only when the last one is every seconds old (one
	// index probe of the newest mark: no mark, no other cost), and a new
	// mark deletes the oldest two when their number is cap behind it, which
	// holds the table at cap marks without counting it.
	sqlHorizonMark = `mk AS (
	INSERT INTO riverbus_horizon_mark (at, committed_through)
	SELECT clock_timestamp(), LEAST(mv.top, mv.new_skip - 1, (SELECT min(s.first_sequence) - 1 FROM riverbus_skipped s))
	FROM mv
	WHERE coalesce((SELECT max(m.at) FROM riverbus_horizon_mark m), '-infinity') <= clock_timestamp() - mv.every * interval '1 second'
	ON CONFLICT (at) DO NOTHING
	RETURNING n
),
mc AS (
	DELETE FROM riverbus_horizon_mark m
	WHERE m.at IN (SELECT o.at FROM riverbus_horizon_mark o ORDER BY o.at LIMIT 2)
		AND m.n <= (SELECT mk.n - mv.cap FROM mk, mv)
)`

	// Of the xids a snapshot lists as running, the ones that may be writers
	// of riverbus_event: all but those whose transaction is seen to run
	// without a RowExclusiveLock on riverbus_event in this database. A
	// writer takes that lock (INSERT, COPY) before the trigger hands it a
	// sequence and keeps it to the end, so a transaction running without it
	// holds no missing sequence.
	//
	// pg_locks is read once (MATERIALIZED): read twice, a writer could be
	// seen running in the first read and, having committed meanwhile,
	// without its lock in the second, and so be left out of the proof while
	// its sequence was not yet visible to the round: the gap was then
	// "proven" dead and a committed event lost (docs/design.md §2.2). And an xid is left out only if it is still in progress after
	// that read: one that ended meanwhile stays listed, and the next round
	// decides.
	sqlPossibleWriters = `WITH l AS MATERIALIZED (
	SELECT locktype, transactionid, relation, database, mode, granted, virtualtransaction FROM pg_locks
),
not_writers AS MATERIALIZED (
	SELECT x FROM unnest($1::text[]) AS x WHERE EXISTS (
		SELECT 1 FROM l t
		WHERE t.locktype = 'transactionid' AND t.granted
			AND t.transactionid::text::bigint = (x::numeric % 4294967296)::bigint
			AND NOT EXISTS (
				SELECT 1 FROM l r
				WHERE r.locktype = 'relation' AND r.mode = 'RowExclusiveLock'
					AND r.relation = 'riverbus_event'::regclass
					AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
					AND r.virtualtransaction = t.virtualtransaction))
)
SELECT x FROM unnest($1::text[]) AS x
WHERE x NOT IN (SELECT n.x FROM not_writers n WHERE pg_xact_status(n.x::xid8) = 'in progress')`

	// The bound of new gaps is the round's own xid, assigned here, by the
	// round's first write, after its snapshot was taken. first_seen_at is
	// the column's default, now(), moved by the test clock's shift ($3
	// seconds; 0 in production), as the read's gap ages are.
	sqlGapInsert = `INSERT INTO riverbus_gap (first_sequence, last_sequence, xid_bound, first_seen_at)
SELECT f, l, pg_current_xact_id(), now() + $3::float8 * interval '1 second' FROM unnest($1::bigint[], $2::bigint[]) AS g(f, l)`

	sqlGapDelete = `DELETE FROM riverbus_gap WHERE first_sequence = ANY($1) OR last_sequence <= $2`

	// The round's counters, and what the round skips and finds late, in
	// one statement:
	//
	// sk records the timed-out runs ($4 first, $5 last, $6 bound) as skipped
	// ranges, split around the events committed inside them as this
	// statement sees them (at least every one the round's read saw): those
	// are delivered on the pools' normal path once the horizon has passed
	// them, so they are not late. The cost is one row per run plus one per
	// event inside it, whatever the run's length.
	//
	// lt records as late every committed event inside the ranges $3 (ranges
	// the read found with such events not yet recorded). It runs before the
	// round deletes the ranges it proved (sqlSkippedDelete, a later
	// statement), so no late event is forgotten with its range.
	//
	// The counters saturate rather than overflow: a jump to near 2^63 is a
	// gap of that many sequences.
	sqlHorizonUpdate = `WITH sk AS (
	INSERT INTO riverbus_skipped (first_sequence, last_sequence, xid_bound)
	SELECT s.f, s.l, s.b::xid8 FROM (
		SELECT r.b, lag(v.seq, 1, r.f - 1) OVER (PARTITION BY r.f ORDER BY v.seq) + 1 AS f, v.seq - 1 AS l
		FROM unnest($4::bigint[], $5::bigint[], $6::text[]) AS r(f, l, b)
		CROSS JOIN LATERAL (
			SELECT e.global_sequence AS seq FROM riverbus_event e WHERE e.global_sequence >= r.f AND e.global_sequence <= r.l
			UNION ALL SELECT r.l + 1
		) v
	) s WHERE s.f <= s.l
	ON CONFLICT (first_sequence) DO NOTHING
	RETURNING last_sequence::numeric - first_sequence + 1 AS n
),
lt AS (
	INSERT INTO riverbus_late (sequence)
	SELECT e.global_sequence FROM riverbus_skipped s
	JOIN riverbus_event e ON e.global_sequence >= s.first_sequence AND e.global_sequence <= s.last_sequence
	WHERE s.first_sequence = ANY($3::bigint[])
	ON CONFLICT (sequence) DO NOTHING
	RETURNING 1
),
n AS (SELECT coalesce((SELECT sum(n) FROM sk), 0) AS skipped, (SELECT count(*) FROM lt) AS late),
mv AS (SELECT $1::bigint AS top, (SELECT min(f) FROM unnest($4::bigint[]) AS f) AS new_skip, $7::float8 AS every, $8::bigint AS cap
	WHERE $1::bigint > (SELECT horizon FROM riverbus_horizon)),
` + sqlHorizonMark + `
UPDATE riverbus_horizon SET horizon = $1,
	gaps_proven_dead = LEAST(gaps_proven_dead + $2::numeric, 9223372036854775807)::bigint,
	gaps_skipped = LEAST(gaps_skipped + n.skipped, 9223372036854775807)::bigint,
	late_events = late_events + n.late,
	updated_at = now()
FROM n
RETURNING LEAST(n.skipped, 9223372036854775807)::bigint, n.late`

	// Ranges proven: every transaction that could hold one of their
	// sequences has ended.
	sqlSkippedDelete = `DELETE FROM riverbus_skipped WHERE first_sequence = ANY($1)`

	// A late event is retired once every pool that should see it has
	// handled it and no skipped range covers it (a range still watched
	// would find it again and make it late a second time). Its pools'
	// records go with it, and so do records of sequences that are neither
	// late nor covered by a range (a pool's record that lost a race with
	// a retirement).
	sqlSkippedRetire = `WITH r AS (
	DELETE FROM riverbus_late s WHERE NOT EXISTS (
		SELECT 1 FROM riverbus_pool p WHERE p.start_after < s.sequence AND NOT EXISTS (
			SELECT 1 FROM riverbus_pool_late l WHERE l.pool = p.name AND l.sequence = s.sequence))
		AND NOT ` + sqlCoveredBySkipped + `
	RETURNING s.sequence
),
o AS (
	DELETE FROM riverbus_pool_late l
	WHERE l.sequence IN (SELECT r.sequence FROM r)
		OR (NOT EXISTS (SELECT 1 FROM riverbus_late s WHERE s.sequence = l.sequence)
			AND NOT ` + sqlCoveredBySkippedL + `)
)
SELECT count(*) FROM r`

	// Whether a skipped range covers s.sequence (or l.sequence): ranges do
	// not overlap, so the one with the greatest first at or below it is the
	// only candidate, one index probe.
	sqlCoveredBySkipped = `coalesce((SELECT k.last_sequence FROM riverbus_skipped k WHERE k.first_sequence <= s.sequence
			ORDER BY k.first_sequence DESC LIMIT 1) >= s.sequence, false)`
	sqlCoveredBySkippedL = `coalesce((SELECT k.last_sequence FROM riverbus_skipped k WHERE k.first_sequence <= l.sequence
				ORDER BY k.first_sequence DESC LIMIT 1) >= l.sequence, false)`

	// The notification that the horizon moved (to $1) or late events were
	// found, for other instances and `riverbus tail`: sent after the round
	// commits, alone in its transaction, which commits asynchronously (it
	// writes nothing but the notification queue).
	sqlHorizonNotify = `SELECT set_config('synchronous_commit', 'off', true), pg_notify('riverbus_horizon', $1::text)`
)
