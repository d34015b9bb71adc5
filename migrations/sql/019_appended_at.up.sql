-- Retention's keep period runs on when the database appended an event, a
-- time its appender cannot choose (docs/operations.md "Event retention", docs/design.md §8).
-- It used to run on occurred_at, which the appender sets: one event claiming
-- to occur in 2099 held the keep period's floor, and with it every event
-- appended after it, until 2099; and the oldest event's age (what
-- RiverbusRetentionHeld alerts on) read 0, so nothing said so.
--
-- appended_at is stamped by a trigger, as global_sequence and
-- transaction_id are (001): whatever an INSERT or COPY supplies is
-- overwritten, so every path follows the rule. Its value is the appending
-- transaction's start, the database's transaction_timestamp(), rather
-- than statement_timestamp(), because
--   * it is occurred_at's default: for an application that leaves
--     occurred_at alone, the keep period means exactly what it meant
--     before, and the events of before this migration (below) keep by the
--     same time as those after;
--   * the events of a transaction, which become visible together, get one
--     time, whatever statements appended them.
-- Neither reads a clock per row (clock_timestamp() would).
-- A transaction held open makes its events look older than their commit,
-- never younger: at worst they go as soon as every pool has passed them,
-- never before (the floor still holds them), and nobody can hold the log
-- with them.
--
-- The column is added without a default, so the table is not rewritten:
-- the events appended before this migration have no appended_at. Their keep
-- time is the earlier of their occurred_at and the moment this migration
-- took riverbus_event's lock (riverbus_retention.appended_at_since), which
-- every one of them was appended before: an old event that claims a future
-- occurred_at is held at most a keep period after the upgrade, and the
-- others keep as they did. A fallback, not a backfill: the old events leave
-- with retention, and no batch has to rewrite them.
ALTER TABLE riverbus_event ADD COLUMN appended_at timestamptz;

-- A trigger of its own, not a line in riverbus_event_assign: the horizon
-- checks the assign trigger's body (docs/design.md §2.4), and the order rule of
-- §1 is all that trigger does. Its one name is schema-qualified, so no
-- search_path (nor a SET clause, which costs a save and restore on every
-- row) can change what it calls.
CREATE FUNCTION riverbus_event_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.appended_at := pg_catalog.transaction_timestamp();
  RETURN NEW;
END
$$;

CREATE TRIGGER riverbus_event_stamp BEFORE INSERT ON riverbus_event
  FOR EACH ROW EXECUTE FUNCTION riverbus_event_stamp();

-- As 004 does for every function of the schema.
GRANT EXECUTE ON FUNCTION riverbus_event_stamp() TO riverbus_worker;

-- Read after the ALTER TABLE above took riverbus_event's ACCESS EXCLUSIVE
-- lock, which waited for every transaction that had appended: each event
-- without appended_at was appended (by its transaction's start) before it.
ALTER TABLE riverbus_retention ADD COLUMN appended_at_since timestamptz;
UPDATE riverbus_retention SET appended_at_since = clock_timestamp();
ALTER TABLE riverbus_retention ALTER COLUMN appended_at_since SET NOT NULL;

-- riverbus_retention_step (015) with its keep rule on the append time; the
-- oldest_at and newest_at it returns are append times too. It and
-- riverbus_retention_holds, which it calls, run as their owner: both are
-- pinned to pg_catalog, pg_temp and name every object with its schema, so
-- nothing a caller or PUBLIC can create, in pg_temp or in a schema PUBLIC may
-- write, stands in for what they use.
--
-- The step takes riverbus_retention_lock where the step it replaces takes
-- it: the table may have moved since 015 (to a schema of riverbus's own,
-- out of reach of other logins), and its name is read from the current
-- definition and resolved, not assumed.
DO $do$
DECLARE
  s text := (SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = 'riverbus_event'::regclass);
  step regprocedure := 'riverbus_retention_step(bigint, timestamptz, interval, integer, boolean)'::regprocedure;
  locked text[] := pg_catalog.regexp_match(pg_catalog.pg_get_functiondef(step),
    'LOCK TABLE\s+((?:(?:"[^"]+"|[A-Za-z0-9_$]+)\.)?riverbus_retention_lock)\M');
  lock_table text := (SELECT format('%I.%I', n.nspname, c.relname)
                      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                      WHERE c.oid = pg_catalog.to_regclass(locked[1]));
BEGIN
  IF lock_table IS NULL THEN
    RAISE EXCEPTION 'migration 019: riverbus_retention_step takes no lock on a riverbus_retention_lock that exists (found %)', locked;
  END IF;
  EXECUTE format($sql$
CREATE OR REPLACE FUNCTION %1$I.riverbus_retention_holds() RETURNS TABLE (rule text, holder text, floor bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT 'horizon', '', coalesce((SELECT h.horizon FROM %1$I.riverbus_horizon h), 0)
  UNION ALL
  SELECT 'pool', p.name, LEAST(p.cursor_seq, coalesce(pc.checkpoint_seq, p.start_after),
    (SELECT min((CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END)) - 1
     FROM %1$I.river_job j WHERE j.kind = p.name AND j.state NOT IN ('cancelled', 'completed', 'discarded')))
  FROM %1$I.riverbus_pool p LEFT JOIN %1$I.riverbus_pool_checkpoint pc ON pc.pool = p.name
  UNION ALL
  (SELECT 'skipped', s.first_sequence || '-' || s.last_sequence, s.first_sequence - 1
   FROM %1$I.riverbus_skipped s ORDER BY s.first_sequence LIMIT 1)
  UNION ALL
  (SELECT 'late', l.sequence::text, l.sequence - 1 FROM %1$I.riverbus_late l ORDER BY l.sequence LIMIT 1)
  UNION ALL
  (SELECT 'dead letter', d.pool || ' job ' || d.job_id, d.global_sequence - 1
   FROM %1$I.riverbus_dead_letter d
   WHERE d.args ? 'undeliverable' AND d.global_sequence IS NOT NULL
   ORDER BY d.global_sequence LIMIT 1)
  UNION ALL
  SELECT 'no pools', '', r.trimmed_through FROM %1$I.riverbus_retention r
  WHERE NOT EXISTS (SELECT 1 FROM %1$I.riverbus_pool)
$fn$;

CREATE OR REPLACE FUNCTION %1$I.riverbus_retention_step(p_from bigint, p_now timestamptz, p_keep interval, p_limit integer, p_apply boolean)
RETURNS TABLE (from_sequence bigint, through_sequence bigint, events bigint, oldest_at timestamptz, newest_at timestamptz,
  floor bigint, stopped_by text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  pol %1$I.riverbus_retention;
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
    RAISE EXCEPTION 'riverbus_retention_step: p_limit must be between 1 and 100000, got %%', p_limit;
  END IF;
  IF p_apply THEN
    -- Before anything is read: the statements below then see every pool
    -- create or reset that committed before the lock was granted.
    LOCK TABLE %2$s IN SHARE ROW EXCLUSIVE MODE;
    SELECT * INTO pol FROM %1$I.riverbus_retention;
    v_keep := CASE WHEN pol.enabled THEN pol.keep END;
    v_from := pol.trimmed_through;
  ELSE
    SELECT * INTO pol FROM %1$I.riverbus_retention;
    v_keep := coalesce(p_keep, CASE WHEN pol.enabled THEN pol.keep END);
    v_from := GREATEST(coalesce(p_from, 0), pol.trimmed_through);
  END IF;
  SELECT min(h.floor) INTO v_floor FROM %1$I.riverbus_retention_holds() h;
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
  -- step costs the same however long the log is. An event's keep time is
  -- when it was appended (migration 019), or for an event appended before
  -- that migration, the earlier of its occurred_at and the migration. The
  -- transaction rule probes each distinct transaction once, for its last
  -- event, through (transaction_id, global_sequence) backwards.
  WITH b AS MATERIALIZED (
    SELECT e.global_sequence AS seq, coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)) AS kept_since,
      e.transaction_id
    FROM %1$I.riverbus_event e
    WHERE e.global_sequence > v_from AND e.global_sequence <= v_floor
    ORDER BY e.global_sequence LIMIT p_limit
  ), x AS MATERIALIZED (
    SELECT t.transaction_id,
      (SELECT max(e.global_sequence) FROM %1$I.riverbus_event e WHERE e.transaction_id = t.transaction_id) AS last
    FROM (SELECT DISTINCT b.transaction_id FROM b) t
  ), s AS (
    SELECT b.seq, CASE WHEN b.kept_since > v_cutoff THEN 'keep' WHEN x.last > v_floor THEN 'transaction' END AS why
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
      DELETE FROM %1$I.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through
      RETURNING coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)) AS kept_since, e.transaction_id
    ), c AS (
      DELETE FROM %1$I.riverbus_command c
      WHERE c.transaction_id IN (SELECT DISTINCT d.transaction_id FROM d)
        AND NOT EXISTS (SELECT 1 FROM %1$I.riverbus_event e
          WHERE e.transaction_id = c.transaction_id AND e.global_sequence > v_through)
    )
    SELECT count(*), min(d.kept_since), max(d.kept_since) INTO v_deleted, oldest_at, newest_at FROM d;
    UPDATE %1$I.riverbus_retention SET trimmed_through = v_through, events_trimmed = events_trimmed + v_deleted,
      last_trimmed_at = now()
    WHERE trimmed_through < v_through;
  ELSE
    SELECT count(*), min(coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since))),
      max(coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)))
    INTO v_deleted, oldest_at, newest_at
    FROM %1$I.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through;
  END IF;
  RETURN QUERY SELECT v_from, GREATEST(v_through, v_from), v_deleted, oldest_at, newest_at, v_floor, v_why;
END
$fn$;
$sql$, s, lock_table);
END
$do$;
