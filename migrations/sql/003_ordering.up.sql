-- Ordered pools (per key, or the whole pool) and transaction-grouped
-- delivery.
--
-- A job of an ordered pool carries its lane in metadata->>'riverbus_lane'
-- (the event key, or '' for a globally ordered pool). At most one job per
-- lane is out of the `pending` state and unfinished; the others wait as
-- River `pending` jobs. When a lane's job finishes, the trigger below makes
-- the lane's lowest pending job available, in the same transaction as the
-- completion, whichever path completes it (River's completer, JobCompleteTx,
-- River UI, the rescuer, a cancel, a delete).
--
-- The fan-out decides available-or-pending while it holds an exclusive
-- advisory lock on each lane's bucket (taken with try-locks, so it never
-- waits while holding one); a release takes the bucket's lock shared and
-- waits. So a release either runs after the fan-out's batch committed and
-- sees its pending jobs, or before it and the fan-out sees the lane free.

ALTER TABLE riverbus_pool
  ADD COLUMN ordering text NOT NULL DEFAULT 'none'
    CONSTRAINT riverbus_pool_ordering CHECK (ordering IN ('none', 'key', 'global')),
  ADD COLUMN on_dead_letter text NOT NULL DEFAULT 'release'
    CONSTRAINT riverbus_pool_on_dead_letter CHECK (on_dead_letter IN ('release', 'block')),
  ADD COLUMN grouping text NOT NULL DEFAULT 'none'
    CONSTRAINT riverbus_pool_grouping CHECK (grouping IN ('none', 'transaction'));

ALTER TABLE riverbus_dead_letter
  ADD COLUMN lane text,
  ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}';
CREATE INDEX riverbus_dead_letter_lane ON riverbus_dead_letter (pool, lane) WHERE lane IS NOT NULL;

CREATE OR REPLACE FUNCTION riverbus_dead_letter_keep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority, errors,
                                    discarded_at, lane, metadata)
  SELECT NEW.id, NEW.kind,
         CASE WHEN NEW.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (NEW.args->>'global_sequence')::bigint END,
         NEW.queue, NEW.args, NEW.attempt, NEW.max_attempts, NEW.priority,
         coalesce(to_jsonb(NEW.errors), '[]'::jsonb), coalesce(NEW.finalized_at, now()),
         NEW.metadata->>'riverbus_lane', coalesce(NEW.metadata, '{}'::jsonb)
  FROM riverbus_pool p WHERE p.name = NEW.kind
  ON CONFLICT (job_id) DO UPDATE SET
    attempt = EXCLUDED.attempt, errors = EXCLUDED.errors, discarded_at = EXCLUDED.discarded_at;
  RETURN NULL;
END
$$;

-- Lanes of ordered pools' unfinished jobs, in sequence order.
CREATE INDEX riverbus_job_lane ON river_job (
  kind,
  (metadata->>'riverbus_lane'),
  (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END),
  id
) WHERE metadata ? 'riverbus_lane' AND state NOT IN ('cancelled', 'completed', 'discarded');

-- The advisory lock of a lane's bucket: (hash of the pool, one of 128
-- buckets). Buckets bound how many locks one fan-out batch takes.
CREATE FUNCTION riverbus_lane_lock_class(pool text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT hashtext('riverbus.lane:' || pool) $$;

CREATE FUNCTION riverbus_lane_bucket(lane text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT hashtext(lane) & 127 $$;

-- Make the lane's lowest pending job available, unless the lane still has a
-- job in flight or is blocked by a dead letter. Returns the released job's
-- id, or NULL.
CREATE FUNCTION riverbus_release_lane(p_kind text, p_lane text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  next_id bigint;
  next_queue text;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(riverbus_lane_lock_class(p_kind), riverbus_lane_bucket(p_lane));
  IF EXISTS (
    SELECT 1 FROM river_job
    WHERE kind = p_kind AND metadata ? 'riverbus_lane' AND metadata->>'riverbus_lane' = p_lane
      AND state NOT IN ('cancelled', 'completed', 'discarded', 'pending')
  ) THEN
    RETURN NULL;
  END IF;
  IF EXISTS (
    SELECT 1 FROM riverbus_dead_letter d JOIN riverbus_pool p ON p.name = d.pool
    WHERE d.pool = p_kind AND d.lane = p_lane AND p.on_dead_letter = 'block'
  ) THEN
    RETURN NULL;
  END IF;
  UPDATE river_job SET state = 'available', scheduled_at = now()
  WHERE id = (
    SELECT id FROM river_job
    WHERE kind = p_kind AND metadata ? 'riverbus_lane' AND metadata->>'riverbus_lane' = p_lane
      AND state NOT IN ('cancelled', 'completed', 'discarded') AND state = 'pending'
    ORDER BY (CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END), id
    LIMIT 1
  )
  RETURNING id, queue INTO next_id, next_queue;
  IF next_id IS NOT NULL THEN
    -- River's own insert notification, so a worker fetches it at once.
    PERFORM pg_notify(current_schema() || '.river_insert', json_build_object('queue', next_queue)::text);
  END IF;
  RETURN next_id;
END
$$;

CREATE FUNCTION riverbus_lane_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM riverbus_release_lane(OLD.kind, OLD.metadata->>'riverbus_lane');
    RETURN NULL;
  END IF;
  -- A dead letter in a pool that blocks on dead letters keeps its lane.
  IF NEW.state = 'discarded' AND EXISTS (
    SELECT 1 FROM riverbus_pool WHERE name = NEW.kind AND on_dead_letter = 'block'
  ) THEN
    RETURN NULL;
  END IF;
  PERFORM riverbus_release_lane(NEW.kind, NEW.metadata->>'riverbus_lane');
  RETURN NULL;
END
$$;

CREATE TRIGGER riverbus_lane_finished AFTER UPDATE OF state ON river_job
  FOR EACH ROW WHEN (NEW.metadata ? 'riverbus_lane'
    AND NEW.state IN ('cancelled', 'completed', 'discarded')
    AND OLD.state NOT IN ('cancelled', 'completed', 'discarded'))
  EXECUTE FUNCTION riverbus_lane_finished();

CREATE TRIGGER riverbus_lane_deleted AFTER DELETE ON river_job
  FOR EACH ROW WHEN (OLD.metadata ? 'riverbus_lane'
    AND OLD.state NOT IN ('cancelled', 'completed', 'discarded', 'pending'))
  EXECUTE FUNCTION riverbus_lane_finished();
