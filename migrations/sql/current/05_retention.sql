-- Event retention (docs/design.md §8): what holds it back, one step of it, and
-- the lock a pool create or reset takes against a step.

DO $current$
DECLARE
  s text := current_schema();
  priv text := current_setting('riverbus.private_schema');
BEGIN
  -- riverbus_retention_holds: what holds retention back, one row per rule;
  -- every event above floor is kept (015 describes each rule). It runs as
  -- the owner when the step calls it, so it is pinned too.
  -- riverbus_retention_step: at most p_limit events above p_from, up to
  -- the first one that must stay, kept by their append time (019).
  -- SECURITY DEFINER, so that riverbus_worker, which may not DELETE from
  -- riverbus_event, can run retention and nothing else: every rule is
  -- checked here. It takes the lock in the private schema (018).
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
    -- The horizon's marks (024) that no rewind may use any more: those
    -- older than the first whose committed_through reaches where the log
    -- now begins (a rewind to a mark below it would owe events deleted
    -- here). Marks are a few seconds apart, so these are the few of the
    -- stretch of history this step deleted, and the index scan stops at
    -- the first mark kept.
    DELETE FROM %1$I.riverbus_horizon_mark m
    WHERE m.at < (SELECT k.at FROM %1$I.riverbus_horizon_mark k WHERE k.committed_through >= v_through ORDER BY k.at LIMIT 1);
  ELSE
    SELECT count(*), min(coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since))),
      max(coalesce(e.appended_at, LEAST(e.occurred_at, pol.appended_at_since)))
    INTO v_deleted, oldest_at, newest_at
    FROM %1$I.riverbus_event e WHERE e.global_sequence > v_from AND e.global_sequence <= v_through;
  END IF;
  RETURN QUERY SELECT v_from, GREATEST(v_through, v_from), v_deleted, oldest_at, newest_at, v_floor, v_why;
END
$fn$;
$sql$, s, format('%I.%I', priv, 'riverbus_retention_lock'));

  -- A pool create or reset takes this before it reads trimmed_through, so a
  -- retention step either sees the reset pool or the reset sees the step.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %I.riverbus_retention_start_lock() RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $b$
BEGIN
  LOCK TABLE %I.riverbus_retention_lock IN ROW EXCLUSIVE MODE;
END
$b$$f$, s, priv);
END
$current$;

REVOKE ALL ON FUNCTION riverbus_retention_step(bigint, timestamptz, interval, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION riverbus_retention_holds(), riverbus_retention_start_lock(),
  riverbus_retention_step(bigint, timestamptz, interval, integer, boolean) TO riverbus_worker;
