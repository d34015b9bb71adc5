-- The locks riverbus depends on, out of reach of roles without riverbus
-- privileges.
--
-- Advisory locks need no privilege: an application login (riverbus_app)
-- that took the horizon round's advisory lock stopped delivery to every
-- pool for as long as it liked, and one that took a lane bucket's lock
-- stalled ordered pools and River's completer (which releases lanes inside
-- its own transaction). pg_locks shows every advisory key, so no key can be
-- kept secret either.
--
-- The horizon round now takes an EXCLUSIVE table lock on
-- riverbus_horizon_lock, a table nothing is ever written to. LOCK TABLE in
-- that mode needs UPDATE, DELETE or TRUNCATE on the table, which only
-- riverbus_worker (and the owner) has; a SELECT by anyone else is refused
-- before it could lock. It conflicts with itself, so one round at a time
-- runs, and like the advisory lock it assigns the transaction no xid: the
-- gap proof still gets its bound from the round's first write, after its
-- snapshot (docs/design.md §2.1). Nothing writes to the table, so autovacuum never
-- takes a conflicting lock on it either.
CREATE TABLE riverbus_horizon_lock ();
GRANT UPDATE ON riverbus_horizon_lock TO riverbus_worker;

-- A try-lock: false when another round holds it. The exception block is a
-- subtransaction, which takes no xid unless it writes; on success its lock
-- passes to the transaction.
CREATE FUNCTION riverbus_horizon_try_lock() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  LOCK TABLE riverbus_horizon_lock IN EXCLUSIVE MODE NOWAIT;
  RETURN true;
EXCEPTION WHEN lock_not_available THEN
  RETURN false;
END
$$;

-- Lane buckets become rows: (pool, bucket) for each of an ordered pool's
-- 128 buckets. The fan-out locks a batch's buckets FOR UPDATE, releases
-- take them FOR SHARE, as they took the advisory locks exclusive and
-- shared. Row locks need UPDATE on the table: riverbus_worker's, not
-- riverbus_app's. Rows exist for every pool (ordered or not: a pool's
-- ordering may change), made by the trigger below and here for the pools
-- that exist, and go with their pool.
CREATE TABLE riverbus_lane_lock (
  pool text NOT NULL REFERENCES riverbus_pool (name) ON DELETE CASCADE ON UPDATE CASCADE,
  bucket integer NOT NULL CONSTRAINT riverbus_lane_lock_bucket CHECK (bucket BETWEEN 0 AND 127),
  PRIMARY KEY (pool, bucket)
);
GRANT SELECT, UPDATE ON riverbus_lane_lock TO riverbus_worker;

INSERT INTO riverbus_lane_lock (pool, bucket)
SELECT p.name, b FROM riverbus_pool p, generate_series(0, 127) AS b
ON CONFLICT DO NOTHING;

CREATE FUNCTION riverbus_lane_lock_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO riverbus_lane_lock (pool, bucket)
  SELECT NEW.name, b FROM generate_series(0, 127) AS b
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$;

CREATE TRIGGER riverbus_lane_lock_rows AFTER INSERT ON riverbus_pool
  FOR EACH ROW EXECUTE FUNCTION riverbus_lane_lock_rows();

-- 009's riverbus_release_lanes, with the bucket locks taken as row locks,
-- and lock waits bounded (it runs inside River's completer, whose wait must
-- never be unbounded; the only holders are fan-out batches, which hold a
-- bucket for one short transaction and bound their own waits).
CREATE OR REPLACE FUNCTION riverbus_release_lanes(p_kinds text[], p_lanes text[]) RETURNS bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET lock_timeout = '5s' AS $$
DECLARE
  released bigint;
BEGIN
  -- Shared, in bucket order: a fan-out batch deciding pending-or-available
  -- for these lanes holds them exclusive, so this waits for it to commit.
  -- Row locks of riverbus_lane_lock, which only riverbus_worker (and the
  -- owner) may take; the wait is bounded by the function's lock_timeout.
  PERFORM count(*) FROM (
    SELECT 1 FROM riverbus_lane_lock ll
    WHERE (ll.pool, ll.bucket) IN (SELECT k, riverbus_lane_bucket(l) FROM unnest(p_kinds, p_lanes) AS u(k, l))
    ORDER BY ll.pool, ll.bucket
    FOR SHARE OF ll
  ) s;
  -- Transaction-local, and rolled back with a failed statement's
  -- subtransaction; reset below.
  PERFORM set_config('riverbus.lane_release', 'on', true);
  -- A new statement after the locks: it sees every batch committed before.
  WITH lanes AS (
    SELECT DISTINCT k AS kind, l AS lane FROM unnest(p_kinds, p_lanes) AS u(k, l)
  ),
  free AS (
    SELECT x.kind, x.lane FROM lanes x
    WHERE NOT EXISTS (
      SELECT 1 FROM river_job j
      WHERE j.kind = x.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = x.lane
        AND j.state IN ('available', 'running', 'retryable', 'scheduled'))
    AND NOT EXISTS (
      SELECT 1 FROM riverbus_dead_letter d JOIN riverbus_pool p ON p.name = d.pool
      WHERE d.pool = x.kind AND d.lane = x.lane AND p.on_dead_letter = 'block')
  ),
  next AS (
    SELECT (
      SELECT j.id FROM river_job j
      WHERE j.kind = f.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = f.lane
        AND j.state NOT IN ('cancelled', 'completed', 'discarded') AND j.state = 'pending'
      ORDER BY (CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END), j.id
      LIMIT 1
    ) AS id
    FROM free f
  ),
  made AS (
    UPDATE river_job j SET state = 'available', scheduled_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM next WHERE id IS NOT NULL)) AND j.state = 'pending'
    RETURNING j.queue
  ),
  queues AS (
    SELECT queue, count(*) AS n FROM made GROUP BY queue
  )
  -- River's own insert notification, so a worker fetches them at once.
  SELECT coalesce(sum(n), 0), count(pg_notify(current_schema() || '.river_insert', json_build_object('queue', queue)::text))
  INTO released FROM queues;
  PERFORM set_config('riverbus.lane_release', 'off', true);
  RETURN released;
END
$$;


-- As 004 does for every function of the schema.
GRANT EXECUTE ON FUNCTION riverbus_horizon_try_lock(), riverbus_lane_lock_rows() TO riverbus_worker;
