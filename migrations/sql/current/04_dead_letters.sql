-- Dead letters and retries of pool jobs: the copy of a discarded job, the
-- rebuild of an undeliverable event's envelope when its dead letter is put
-- back to work, and the retry of a job River's rescuer discarded. Their
-- triggers are in triggers.sql.

DO $current$
DECLARE
  s text := current_schema();
BEGIN
  -- A copy of every pool job that River discards (002, 003).
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_dead_letter_keep() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
  INSERT INTO %1$I.riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority, errors,
                                    discarded_at, lane, metadata)
  SELECT NEW.id, NEW.kind,
         CASE WHEN NEW.args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (NEW.args->>'global_sequence')::bigint END,
         NEW.queue, NEW.args, NEW.attempt, NEW.max_attempts, NEW.priority,
         coalesce(to_jsonb(NEW.errors), '[]'::jsonb), coalesce(NEW.finalized_at, now()),
         NEW.metadata->>'riverbus_lane', coalesce(NEW.metadata, '{}'::jsonb)
  FROM %1$I.riverbus_pool p WHERE p.name = NEW.kind
  ON CONFLICT (job_id) DO UPDATE SET
    attempt = EXCLUDED.attempt, errors = EXCLUDED.errors, discarded_at = EXCLUDED.discarded_at;
  RETURN NULL;
END
$body$$f$, s);

  -- An undeliverable event's dead letter carries a stub, not the payload;
  -- put back to work by anyone, its envelope is rebuilt from the log, or
  -- the retry is refused when the event is still undeliverable (007).
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_undeliverable_rebuild() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
  seqs bigint[];
  events jsonb;
  envelope jsonb;
  still boolean;
BEGIN
  IF NEW.args ? 'sequences' THEN
    seqs := ARRAY(SELECT jsonb_array_elements_text(NEW.args->'sequences')::bigint);
  ELSE
    seqs := ARRAY[(NEW.args->>'global_sequence')::bigint];
  END IF;
  IF (SELECT count(*) FROM %1$I.riverbus_event WHERE global_sequence = ANY (seqs)) <> cardinality(seqs) THEN
    RAISE EXCEPTION 'riverbus: job %% is the dead letter of an undeliverable event whose row is gone from riverbus_event; purge it (riverbus dlq purge %%)', NEW.id, NEW.id;
  END IF;
  -- Still undeliverable (nobody repaired the event): the retry is refused
  -- and the job stays the dead letter it was (007 says why).
  BEGIN
    events := %1$I.riverbus_event_envelope(seqs);
    IF NEW.args ? 'sequences' THEN
      envelope := (NEW.args - 'undeliverable' - 'sequences') || jsonb_build_object('events', events);
    ELSE
      envelope := (NEW.args - 'undeliverable') || (events->0);
    END IF;
    still := jsonb_path_exists(envelope, 'lax $.**{9999 to last}');
  EXCEPTION WHEN statement_too_complex OR program_limit_exceeded THEN
    still := true;
  END;
  IF still THEN
    NEW.state := 'discarded';
    NEW.args := OLD.args;
    NEW.finalized_at := OLD.finalized_at;
    NEW.scheduled_at := OLD.scheduled_at;
    NEW.max_attempts := OLD.max_attempts;
    NEW.errors := coalesce(OLD.errors, '{}') || jsonb_build_object('at', now(), 'attempt', OLD.attempt,
      'error', 'retry refused: the event is still undeliverable (' || (OLD.args->>'undeliverable') ||
        '); repair it in riverbus_event, then retry');
    RETURN NEW;
  END IF;
  NEW.args := envelope;
  RETURN NEW;
END
$body$$f$, s);

  -- A stuck job that River's rescuer discards because the leading client
  -- has no worker for its pool is retried on the pool's schedule (005,
  -- 014): failure n waits retry_base × retry_factor^(n-1), at most
  -- retry_max_delay, shortened by up to retry_jitter. bustype.RetrySchedule
  -- is the same formula in Go; TestRescueRetryIsTheGoSchedule keeps them in
  -- step.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_rescue_retry() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
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
      FROM %1$I.riverbus_pool p WHERE p.name = NEW.kind;
    IF FOUND THEN
      NEW.state := 'retryable';
      NEW.finalized_at := NULL;
      NEW.scheduled_at := now() + make_interval(secs =>
        least(base_secs * power(factor, least(cardinality(NEW.errors) - 1, 300)), max_secs) * (1 - jitter * random()));
    END IF;
  END IF;
  RETURN NEW;
END
$body$$f$, s);
END
$current$;

GRANT EXECUTE ON FUNCTION riverbus_dead_letter_keep(), riverbus_undeliverable_rebuild(), riverbus_rescue_retry()
  TO riverbus_worker;
