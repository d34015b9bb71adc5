-- Events that could never be delivered are refused at append time, where
-- that is cheap.
--
-- Size: a pool job's args are the event's envelope, one jsonb value, which
-- PostgreSQL limits to 256 MB of content (a transaction group's job holds
-- several events). Data and metadata together are bounded to 64 MiB, as
-- the jsonb values are stored: in a CHECK on a value built by the insert,
-- pg_column_size is its full binary size, read from the value's header
-- without walking it. (A value copied from another table may arrive
-- already compressed, and then counts compressed: the fan-out still turns
-- one too big into a dead letter.) The Go API (outbox.EventMaxBytes) bounds the JSON
-- text the same.
--
-- Depth is not checked here: measuring it walks the whole value on every
-- insert. outbox.Append refuses JSON nested deeper than
-- outbox.EventMaxDepth; an event appended by SQL past that and past
-- encoding/json's 10,000 levels becomes a dead letter of each pool that
-- matches it, with the reason (see docs/operations.md, "Dead letters").
--
-- NOT VALID: rows appended before this migration stay; the fan-out turns
-- any of them it cannot deliver into dead letters.
ALTER TABLE riverbus_event ADD CONSTRAINT riverbus_event_size
  CHECK (pg_column_size(data) + pg_column_size(metadata) <= 67108864) NOT VALID;

-- A dead letter of an event the fan-out could not turn into a job carries a
-- stub in its args: the event's identity and "undeliverable": the reason,
-- not the payload (fanout/insert.go). `riverbus dlq retry` rebuilds the
-- envelope from riverbus_event in Go, which also checks that it can be
-- encoded. Anything else that puts such a job back to work — River UI's
-- retry button, River's JobRetry, plain SQL — would hand the stub to a
-- handler as if it were the event: this trigger rebuilds the envelope from
-- riverbus_event first, as the fan-out's plain path builds it, for one
-- event or a transaction group. If the event row is still too deep for Go,
-- the worker cannot decode the job, which fails and ends a dead letter
-- again, with that error.
CREATE FUNCTION riverbus_event_envelope(p_seqs bigint[]) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_agg(jsonb_build_object('global_sequence', e.global_sequence, 'event_id', e.event_id, 'type', e.type,
           'key', e.key, 'tags', to_jsonb(e.tags), 'data', e.data, 'metadata', e.metadata,
           'occurred_at', e.occurred_at) ORDER BY e.global_sequence)
  FROM riverbus_event e WHERE e.global_sequence = ANY(p_seqs)
$$;

CREATE FUNCTION riverbus_undeliverable_rebuild() RETURNS trigger LANGUAGE plpgsql AS $$
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
  IF (SELECT count(*) FROM riverbus_event WHERE global_sequence = ANY (seqs)) <> cardinality(seqs) THEN
    RAISE EXCEPTION 'riverbus: job % is the dead letter of an undeliverable event whose row is gone from riverbus_event; purge it (riverbus dlq purge %)', NEW.id, NEW.id;
  END IF;
  -- Still undeliverable (nobody repaired the event): the retry is refused
  -- and the job stays the dead letter it was, with a line in its errors
  -- saying why, instead of running a job no worker can decode (River would
  -- retry it with its backoff for days). The depth test is a jsonpath probe
  -- for an item nested as deep as Go's encoder refuses (10,000 levels, less
  -- a level of margin); an envelope over jsonb's limit fails to build.
  BEGIN
    events := riverbus_event_envelope(seqs);
    -- The stub is the envelope without its payload: whatever else it says
    -- (late, a group's part) is kept.
    IF NEW.args ? 'sequences' THEN
      envelope := (NEW.args - 'undeliverable' - 'sequences') || jsonb_build_object('events', events);
    ELSE
      envelope := (NEW.args - 'undeliverable') || (events->0);
    END IF;
    still := jsonb_path_exists(envelope, 'lax $.**{9999 to last}');
  EXCEPTION WHEN statement_too_complex OR program_limit_exceeded THEN
    -- Too deep for this server's stack to walk, or over jsonb's size
    -- limit once rebuilt: undeliverable all the same.
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
$$;

-- Named to fire before 009's riverbus_job_back_to_work (BEFORE triggers run
-- in name order): a refused retry leaves the job discarded, so that one
-- neither removes its dead letter nor puts it back in its lane.
CREATE TRIGGER riverbus_job_back_rebuild BEFORE UPDATE OF state ON river_job
  FOR EACH ROW WHEN (OLD.state = 'discarded' AND NEW.state NOT IN ('cancelled', 'completed', 'discarded')
    AND NEW.args ? 'undeliverable')
  EXECUTE FUNCTION riverbus_undeliverable_rebuild();

-- As 004 does for every function of the schema.
GRANT EXECUTE ON FUNCTION riverbus_event_envelope(bigint[]), riverbus_undeliverable_rebuild() TO riverbus_worker;
