-- The lane release (012) looks up each free lane's next job once.
--
-- Its `next` step was a scalar subquery per lane, filtered on IS NOT NULL;
-- the planner evaluated the subquery in the filter and again for the
-- result, so every lane handed on paid two index scans of its pending jobs
-- where one does. auto_explain of a hand-off flush of 53 lanes: 0.9 ms of
-- its 5.3 ms went to the second lookup. Nothing else changes: the locks,
-- the rules of a free lane and the notification are 012's.
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
  -- Each free lane's lowest pending job, looked up once (a lateral join:
  -- 012's scalar subquery ran twice per lane, in the filter that dropped
  -- lanes without one and again for the result).
  next AS (
    SELECT n.id FROM free f CROSS JOIN LATERAL (
      SELECT j.id FROM river_job j
      WHERE j.kind = f.kind AND j.metadata ? 'riverbus_lane' AND j.metadata->>'riverbus_lane' = f.lane
        AND j.state NOT IN ('cancelled', 'completed', 'discarded') AND j.state = 'pending'
      ORDER BY (CASE WHEN j.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (j.args->>'global_sequence')::bigint END), j.id
      LIMIT 1
    ) n
  ),
  made AS (
    UPDATE river_job j SET state = 'available', scheduled_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM next)) AND j.state = 'pending'
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
