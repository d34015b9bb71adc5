-- Events that could never be delivered are refused at append time, where
-- that is cheap.
--
-- Size: a pool job's args are the event's envelope, one jsonb value, which
-- PostgreSQL limits to 256 MB of content (a transaction group's job holds
-- several events). Data and metadata together are bounded to 64 MiB, as
-- the jsonb values are stored: in a CHECK, before TOAST compresses them,
-- pg_column_size is their full binary size, read from the value's header
-- without walking it. The Go API (outbox.EventMaxBytes) bounds the JSON
-- text the same.
--
-- Depth is not checked here: measuring it walks the whole value on every
-- insert. outbox.Append refuses JSON nested deeper than
-- outbox.EventMaxDepth; an event appended by SQL past that and past
-- encoding/json's 10,000 levels becomes a dead letter of each pool that
-- matches it, with the reason (see README, "Undeliverable events").
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
BEGIN
  IF NEW.args ? 'sequences' THEN
    seqs := ARRAY(SELECT jsonb_array_elements_text(NEW.args->'sequences')::bigint);
  ELSE
    seqs := ARRAY[(NEW.args->>'global_sequence')::bigint];
  END IF;
  events := riverbus_event_envelope(seqs);
  IF coalesce(jsonb_array_length(events), 0) <> cardinality(seqs) THEN
    RAISE EXCEPTION 'riverbus: job % is the dead letter of an undeliverable event whose row is gone from riverbus_event; purge it (riverbus dlq purge %)', NEW.id, NEW.id;
  END IF;
  -- The stub is the envelope without its payload: whatever else it says
  -- (late, a group's part) is kept.
  IF NEW.args ? 'sequences' THEN
    envelope := (NEW.args - 'undeliverable' - 'sequences') || jsonb_build_object('events', events);
  ELSE
    envelope := (NEW.args - 'undeliverable') || (events->0);
  END IF;
  NEW.args := envelope;
  RETURN NEW;
END
$$;

CREATE TRIGGER riverbus_undeliverable_rebuild BEFORE UPDATE OF state ON river_job
  FOR EACH ROW WHEN (OLD.state = 'discarded' AND NEW.state <> 'discarded' AND NEW.args ? 'undeliverable')
  EXECUTE FUNCTION riverbus_undeliverable_rebuild();

-- As 004 does for every function of the schema.
GRANT EXECUTE ON FUNCTION riverbus_event_envelope(bigint[]), riverbus_undeliverable_rebuild() TO riverbus_worker;
