-- One pause (023): a pool's pause and its River queue's pause are one
-- state, whichever door it came through. `riverbus pool pause` and
-- PoolPause set the pool's status and pause its queue (internal/pools,
-- SetStatus); River UI's Pause and Resume, and River's QueuePause and
-- QueueResume, set river_queue.paused_at, and this function carries that
-- to every pool of the queue, so their fan-out stops or goes on with the
-- workers. Before it, River UI's Resume showed a paused pool's queue
-- active while the pool stayed paused and nothing moved.
--
-- A queue row made anew (a worker's first start, River's queue cleaner
-- having deleted an idle one, QueueEnsure) starts paused when it has pools
-- and all of them are paused: the pool's status is the state River's
-- producer then starts from.
--
-- Only real changes of paused_at fire it (the trigger's WHEN), not River's
-- updates of updated_at. A forged pause or resume (a NOTIFY on River's
-- control channel, which any login may send) changes no row, so it pauses
-- no pool. SECURITY DEFINER: whoever may pause the queue's workers
-- (River UI's login included) moves its pools with them, without a grant
-- on riverbus_pool. The pool row's lock is waited for at most lock_timeout:
-- a fan-out batch of the pool holds it for the batch.
DO $current$
DECLARE
  s text := current_schema();
BEGIN
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_queue_paused() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '30s' AS $body$
DECLARE
  v_status text := CASE WHEN NEW.paused_at IS NULL THEN 'active' ELSE 'paused' END;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.paused_at IS NULL
      AND EXISTS (SELECT 1 FROM %1$I.riverbus_pool p WHERE p.queue = NEW.name)
      AND NOT EXISTS (SELECT 1 FROM %1$I.riverbus_pool p WHERE p.queue = NEW.name AND p.status <> 'paused')
    THEN
      NEW.paused_at := now();
    END IF;
    RETURN NEW;
  END IF;
  UPDATE %1$I.riverbus_pool SET status = v_status, updated_at = now()
  WHERE queue = NEW.name AND status <> v_status;
  RETURN NULL;
END
$body$$f$, s);
END
$current$;

REVOKE ALL ON FUNCTION riverbus_queue_paused() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION riverbus_queue_paused() TO riverbus_worker;
