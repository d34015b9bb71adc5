-- Event retention (docs/operations.md "Event retention", docs/design.md §8): riverbus_event no
-- longer has to grow forever. An operator sets a policy, one row here:
-- keep events for a period, and in any case until nothing riverbus runs
-- still needs them. Retention then deletes the oldest events in small
-- batches by global_sequence range, never what a pool, the horizon, a late
-- event or a dead letter still needs.
--
-- The policy. enabled false (the default): nothing is ever deleted. keep:
-- events younger than this (by occurred_at) are kept; '0' keeps them only
-- until every pool has passed them ("until consumed"). trimmed_through:
-- every event at or below it may have been deleted, nothing above it was;
-- it only moves forward, and is what "the beginning" of the log means
-- afterwards (pool create --from beginning starts after it, pool reset
-- --to 0 resets to it, a start below it is refused). Only the owner
-- changes the policy (riverbus retention set); workers read it.
CREATE TABLE riverbus_retention (
  id boolean PRIMARY KEY DEFAULT true CONSTRAINT riverbus_retention_single_row CHECK (id),
  enabled boolean NOT NULL DEFAULT false,
  keep interval NOT NULL DEFAULT '0' CONSTRAINT riverbus_retention_keep CHECK (keep >= interval '0'),
  trimmed_through bigint NOT NULL DEFAULT 0 CONSTRAINT riverbus_retention_trimmed CHECK (trimmed_through >= 0),
  events_trimmed bigint NOT NULL DEFAULT 0,
  last_trimmed_at timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO riverbus_retention DEFAULT VALUES;

-- A batch of retention holds this table's lock in SHARE ROW EXCLUSIVE mode
-- from before it reads what holds the floor until it commits; a pool
-- create or reset takes it in ROW EXCLUSIVE mode before it reads
-- trimmed_through and sets the pool's cursor. The two modes conflict, each
-- reset waits for a batch (one short transaction) and the other way round,
-- and resets do not wait for each other. So a batch either sees the reset
-- pool's cursor and stops below it, or the reset sees the batch's
-- trimmed_through and starts at or after it: no event a reset asks for is
-- deleted. A table lock, as the horizon's (012): LOCK TABLE needs UPDATE
-- on it, so an application login cannot take it.
CREATE TABLE riverbus_retention_lock ();

-- What holds retention back, one row per rule: every event above floor
-- is kept. The effective floor is the least of them.
--   horizon      nothing above the horizon: the horizon still has to prove it
--   pool         each pool's checkpoint (paused pools too: every row of
--                riverbus_pool), or its cursor or its lowest unfinished job
--                when lower
--   skipped      below the lowest skipped range: an event may still commit
--                inside it late, and every pool must get it
--   late         below the lowest late event not yet retired
--   dead letter  below the lowest dead letter of an undeliverable event: its
--                retry rebuilds the envelope from riverbus_event (007)
--   no pools     with no pool at all nothing has consumed the log: it is
--                kept whole (where it begins now), whatever the keep period,
--                for the first pool created --from beginning
-- A missing horizon row holds everything (floor 0).
CREATE FUNCTION riverbus_retention_holds() RETURNS TABLE (rule text, holder text, floor bigint)
LANGUAGE sql STABLE AS $$
  SELECT 'horizon', '', coalesce((SELECT h.horizon FROM riverbus_horizon h), 0)
  UNION ALL
  SELECT 'pool', p.name, LEAST(p.cursor_seq, coalesce(pc.checkpoint_seq, p.start_after),
    -- Its lowest unfinished job (one probe of 002's index, whose expression
    -- this is): a late event's or a retried dead letter's job can be below
    -- the stored checkpoint, which only moves forward.
    (SELECT min((CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END)) - 1
     FROM river_job j WHERE j.kind = p.name AND j.state NOT IN ('cancelled', 'completed', 'discarded')))
  FROM riverbus_pool p LEFT JOIN riverbus_pool_checkpoint pc ON pc.pool = p.name
  UNION ALL
  (SELECT 'skipped', s.first_sequence || '-' || s.last_sequence, s.first_sequence - 1
   FROM riverbus_skipped s ORDER BY s.first_sequence LIMIT 1)
  UNION ALL
  (SELECT 'late', l.sequence::text, l.sequence - 1 FROM riverbus_late l ORDER BY l.sequence LIMIT 1)
  UNION ALL
  (SELECT 'dead letter', d.pool || ' job ' || d.job_id, d.global_sequence - 1
   FROM riverbus_dead_letter d
   WHERE d.args ? 'undeliverable' AND d.global_sequence IS NOT NULL
   ORDER BY d.global_sequence LIMIT 1)
  UNION ALL
  SELECT 'no pools', '', r.trimmed_through FROM riverbus_retention r
  WHERE NOT EXISTS (SELECT 1 FROM riverbus_pool)
$$;

-- One step of retention over the events above p_from (the policy's
-- trimmed_through when applying) and at or below the floor: at most
-- p_limit events, in sequence order, up to the first one that must stay:
--   keep         younger than the keep period (occurred_at > p_now - keep;
--                p_now NULL: the database's now())
--   transaction  its transaction has an event above the floor: a
--                transaction is deleted whole or not at all, so a
--                transaction-grouped pool's "was this group delivered?"
--                probe (docs/design.md §3) never misses the part that was removed
-- It returns the range (from_sequence, through_sequence] it covers, how
-- many events are in it and their oldest and newest occurred_at, the floor,
-- and why it stopped there: keep, transaction, batch (p_limit reached: call
-- again), floor (reached), disabled (no policy).
--
-- p_apply false is the dry run: it deletes nothing and takes no lock;
-- p_keep, when not NULL, previews another keep period than the policy's.
-- p_apply true deletes the range, moves trimmed_through, counts the events;
-- it ignores p_from and p_keep and needs an enabled policy: only the policy,
-- which the owner sets, decides what may be deleted.
--
-- SECURITY DEFINER, so that riverbus_worker, which may not DELETE from
-- riverbus_event, can run retention inside `riverbus run` and nothing
-- else: every rule above is checked here, in the database. Its search_path
-- is pinned below.
CREATE FUNCTION riverbus_retention_step(p_from bigint, p_now timestamptz, p_keep interval, p_limit integer, p_apply boolean)
RETURNS TABLE (from_sequence bigint, through_sequence bigint, events bigint, oldest_at timestamptz, newest_at timestamptz,
  floor bigint, stopped_by text)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  pol riverbus_retention;
  v_keep interval;
  v_from bigint;
  v_floor bigint;
  v_cutoff timestamptz;
  v_n bigint;
  v_max bigint;
  v_stop bigint;
  v_why text;
  v_through bigint;
  v_deleted bigint;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
    RAISE EXCEPTION 'riverbus_retention_step: p_limit must be between 1 and 100000, got %', p_limit;
  END IF;
  IF p_apply THEN
    -- Before anything is read: the statements below then see every pool
    -- create or reset that committed before the lock was granted.
    LOCK TABLE riverbus_retention_lock IN SHARE ROW EXCLUSIVE MODE;
    SELECT * INTO pol FROM riverbus_retention;
    v_keep := CASE WHEN pol.enabled THEN pol.keep END;
    v_from := pol.trimmed_through;
  ELSE
    SELECT * INTO pol FROM riverbus_retention;
    v_keep := coalesce(p_keep, CASE WHEN pol.enabled THEN pol.keep END);
    v_from := GREATEST(coalesce(p_from, 0), pol.trimmed_through);
  END IF;
  SELECT min(h.floor) INTO v_floor FROM riverbus_retention_holds() h;
  IF v_keep IS NULL THEN
    RETURN QUERY SELECT v_from, v_from, 0::bigint, NULL::timestamptz, NULL::timestamptz, v_floor, 'disabled'::text;
    RETURN;
  END IF;
  IF v_floor <= v_from THEN
    RETURN QUERY SELECT v_from, v_from, 0::bigint, NULL::timestamptz, NULL::timestamptz, v_floor, 'floor'::text;
    RETURN;
  END IF;
  v_cutoff := coalesce(p_now, now()) - v_keep;

  -- The candidates, through the primary key: at most p_limit rows, so a
  -- step costs the same however long the log is. The transaction rule
  -- probes each distinct transaction once, for its last event, through
  -- (transaction_id, global_sequence) backwards (a scalar min/max
  -- subquery: never a scan of the events above the floor, which a hashed
  -- EXISTS would make).
  WITH b AS MATERIALIZED (
    SELECT e.global_sequence AS seq, e.occurred_at, e.transaction_id FROM riverbus_event e
    WHERE e.global_sequence > v_from AND e.global_sequence <= v_floor
    ORDER BY e.global_sequence LIMIT p_limit
  ), x AS MATERIALIZED (
    SELECT t.transaction_id,
      (SELECT max(e.global_sequence) FROM riverbus_event e WHERE e.transaction_id = t.transaction_id) AS last
    FROM (SELECT DISTINCT b.transaction_id FROM b) t
  ), s AS (
    SELECT b.seq, CASE WHEN b.occurred_at > v_cutoff THEN 'keep' WHEN x.last > v_floor THEN 'transaction' END AS why
    FROM b JOIN x ON x.transaction_id = b.transaction_id
  )
  SELECT (SELECT count(*) FROM s), (SELECT max(seq) FROM s), f.seq, f.why
  INTO v_n, v_max, v_stop, v_why
  FROM (SELECT NULL) o LEFT JOIN LATERAL (SELECT seq, why FROM s WHERE why IS NOT NULL ORDER BY seq LIMIT 1) f ON true;

  IF v_stop IS NOT NULL THEN
    v_through := v_stop - 1;
  ELSIF v_n >= p_limit THEN
    v_through := v_max;
    v_why := 'batch';
  ELSE
    v_through := v_floor;
    v_why := 'floor';
  END IF;

  IF p_apply AND v_through > v_from THEN
    -- A transaction's recorded command (riverbus_command) goes with the
    -- last of its events: the batch that deletes it (a transaction below
    -- the floor may span two batches).
    WITH d AS (
      DELETE FROM riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through
      RETURNING e.occurred_at, e.transaction_id
    ), c AS (
      DELETE FROM riverbus_command c
      WHERE c.transaction_id IN (SELECT DISTINCT d.transaction_id FROM d)
        AND NOT EXISTS (SELECT 1 FROM riverbus_event e
          WHERE e.transaction_id = c.transaction_id AND e.global_sequence > v_through)
    )
    SELECT count(*), min(d.occurred_at), max(d.occurred_at) INTO v_deleted, oldest_at, newest_at FROM d;
    UPDATE riverbus_retention SET trimmed_through = v_through, events_trimmed = events_trimmed + v_deleted,
      last_trimmed_at = now()
    WHERE trimmed_through < v_through;
  ELSE
    SELECT count(*), min(e.occurred_at), max(e.occurred_at) INTO v_deleted, oldest_at, newest_at
    FROM riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through;
  END IF;
  RETURN QUERY SELECT v_from, GREATEST(v_through, v_from), v_deleted, oldest_at, newest_at, v_floor, v_why;
END
$$;

-- Pin the search_path of the SECURITY DEFINER function to the schema the
-- migrations run in (and pg_temp last), so a caller's objects can never
-- stand in for riverbus's.
DO $$
BEGIN
  EXECUTE format('ALTER FUNCTION riverbus_retention_step(bigint, timestamptz, interval, integer, boolean) SET search_path = %I, pg_temp',
    (SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = 'riverbus_event'::regclass));
END
$$;

-- Grants (migration 004): workers read the policy, take the lock (pool
-- reset, retention batches) and run retention through the function.
-- Nobody but the owner deletes from riverbus_event directly.
REVOKE EXECUTE ON FUNCTION riverbus_retention_step(bigint, timestamptz, interval, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION riverbus_retention_step(bigint, timestamptz, interval, integer, boolean),
  riverbus_retention_holds() TO riverbus_worker;
GRANT SELECT ON riverbus_retention TO riverbus_worker;
GRANT UPDATE ON riverbus_retention_lock TO riverbus_worker;
