-- A retry schedule per pool: after the n-th failure a job is attempted
-- again after retry_base × retry_factor^(n-1), at most retry_max_delay,
-- shortened at random by up to the fraction retry_jitter (docs/operations.md,
-- "Retry schedules"). The River client riverbus builds reads these columns
-- (internal/retry) as its retry policy, for Go handlers and webhooks alike.
--
-- Before this, every pool had River's default: attempt⁴ seconds (1s, 16s,
-- 81s ... about 4 days at attempt 24), so a job of the default 25 attempts
-- held its pool's checkpoint for about 20 days before it became a dead
-- letter. New pools get the defaults below: 1s, 2s, 4s ... 2m8s, then 3
-- minutes, 10% jitter; about 52 minutes from the first failure to the dead
-- letter of a 25-attempt job. Pools that exist already keep a schedule of
-- the same order as before (maximum delay 24 hours: about 9 days to the
-- dead letter), so that an upgrade does not turn an outage of a day into
-- dead letters; `riverbus pool update NAME --retry-max-delay 3m` adopts the
-- default. A job already waiting for a retry keeps the time it has; its
-- next failure follows its pool's schedule.
--
-- The owner changes these columns (pool create and update); 011's grant
-- of UPDATE to riverbus_worker lists its columns, so workers only read them.
ALTER TABLE riverbus_pool
  ADD COLUMN retry_base interval NOT NULL DEFAULT '1 second'
    CONSTRAINT riverbus_pool_retry_base CHECK (retry_base >= interval '1 millisecond'),
  ADD COLUMN retry_factor double precision NOT NULL DEFAULT 2
    CONSTRAINT riverbus_pool_retry_factor CHECK (retry_factor BETWEEN 1 AND 10),
  ADD COLUMN retry_max_delay interval NOT NULL DEFAULT '3 minutes'
    CONSTRAINT riverbus_pool_retry_max_delay CHECK (retry_max_delay <= interval '7 days'),
  ADD COLUMN retry_jitter double precision NOT NULL DEFAULT 0.1
    CONSTRAINT riverbus_pool_retry_jitter CHECK (retry_jitter BETWEEN 0 AND 1),
  ADD CONSTRAINT riverbus_pool_retry_max_delay_base CHECK (retry_max_delay >= retry_base);

-- Pools made before this migration: see above.
UPDATE riverbus_pool SET retry_max_delay = interval '24 hours';

-- A stuck job that River's rescuer discards because the leading client has
-- no worker for its pool is made retryable by riverbus_rescue_retry (005),
-- which scheduled it by River's default (attempt⁴ seconds). It now follows
-- the pool's schedule too, as River's rescuer does for the pools the leader
-- works (it asks the client's retry policy): failure n (the rescuer's
-- error counted) waits retry_base × retry_factor^(n-1), at most
-- retry_max_delay, shortened by up to retry_jitter. The exponent stops at
-- 300, where 10^300 still fits a double and the cap has long applied.
CREATE OR REPLACE FUNCTION riverbus_rescue_retry() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  base_secs double precision;
  factor double precision;
  max_secs double precision;
  jitter double precision;
BEGIN
  IF NEW.errors IS NOT NULL AND cardinality(NEW.errors) > 0
    AND NEW.errors[cardinality(NEW.errors)]->>'error' = 'Stuck job rescued by JobRescuer'
  THEN
    SELECT extract(epoch FROM p.retry_base), p.retry_factor, extract(epoch FROM p.retry_max_delay), p.retry_jitter
      INTO base_secs, factor, max_secs, jitter
      FROM riverbus_pool p WHERE p.name = NEW.kind;
    IF FOUND THEN
      NEW.state := 'retryable';
      NEW.finalized_at := NULL;
      NEW.scheduled_at := now() + make_interval(secs =>
        least(base_secs * power(factor, least(cardinality(NEW.errors) - 1, 300)), max_secs) * (1 - jitter * random()));
    END IF;
  END IF;
  RETURN NEW;
END
$$;
