-- The event log's functions, and those of its triggers (triggers.sql):
-- the number and the append time of each event, immutability, the wake-up,
-- the command record, the envelope, and the repair of planted numbers.

-- Qualified rather than pinned (017): it runs for every tag of every
-- appended row, in riverbus_event's CHECK, and names no relation.
CREATE OR REPLACE FUNCTION riverbus_tags_valid(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT COALESCE(pg_catalog.bool_and(t IS NOT NULL AND t OPERATOR(pg_catalog.~) '^[^=]+='
    AND pg_catalog.octet_length(t) OPERATOR(pg_catalog.<=) 1024), true)
  FROM pg_catalog.unnest(tags) AS t
$$;

-- appended_at, by which retention keeps events (019): a time the appender
-- cannot choose. Its one name is qualified; no SET clause, which would cost
-- a save and restore on every row.
CREATE OR REPLACE FUNCTION riverbus_event_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.appended_at := pg_catalog.transaction_timestamp();
  RETURN NEW;
END
$$;

-- The log is append-only in the columns the fan-out relies on; only the
-- owner's renumbering (riverbus_event_renumber, riverbus_failover_fence)
-- moves a sequence number.
CREATE OR REPLACE FUNCTION riverbus_event_immutable() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF NEW.transaction_id <> OLD.transaction_id
    OR (NEW.global_sequence <> OLD.global_sequence
      AND current_setting('riverbus.renumber', true) IS DISTINCT FROM 'on')
  THEN
    RAISE EXCEPTION 'riverbus_event: global_sequence and transaction_id cannot be changed';
  END IF;
  RETURN NEW;
END
$$;

-- NOTIFY is only a wake-up, never the data: one per statement, unless the
-- writer turned it off with riverbus.notify (010: PREPARE TRANSACTION
-- refuses a transaction that notified).
CREATE OR REPLACE FUNCTION riverbus_event_notify() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF coalesce(nullif(current_setting('riverbus.notify', true), '')::boolean, true) THEN
    PERFORM pg_notify('riverbus_event', '');
  END IF;
  RETURN NULL;
END
$$;

-- The database sets a command's transaction id, as it does an event's (011).
CREATE OR REPLACE FUNCTION riverbus_command_assign() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'riverbus_command: transaction_id cannot be changed';
  END IF;
  NEW.transaction_id := pg_current_xact_id();
  RETURN NEW;
END
$$;

DO $current$
DECLARE
  s text := current_schema();
BEGIN
  -- The xid first, then the number, from riverbus's own sequence
  -- (docs/design.md §1). Qualified rather than pinned: it runs for every
  -- appended row. The horizon checks its body (docs/design.md §2.4).
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_event_assign() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
  -- The order is the point: the xid first, then the sequence number.
  NEW.transaction_id := pg_catalog.pg_current_xact_id();
  NEW.global_sequence := pg_catalog.nextval(%2$L::pg_catalog.regclass);
  RETURN NEW;
END
$body$$f$, s, format('%I.riverbus_event_global_sequence', s));

  -- The envelope of events as riverbus_event holds them, a bustype.Event
  -- each: the retry of an undeliverable event's dead letter rebuilds its
  -- args with it. riversql.EventEnvelope builds the same object in Go's
  -- queries; riversql's TestEnvelopesAgree keeps them and bustype.Event in
  -- step.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_event_envelope(p_seqs bigint[]) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $body$
  SELECT jsonb_agg(jsonb_build_object('global_sequence', e.global_sequence, 'event_id', e.event_id, 'type', e.type,
           'key', e.key, 'tags', to_jsonb(e.tags), 'data', e.data, 'metadata', e.metadata,
           'occurred_at', e.occurred_at, 'version', e.version) ORDER BY e.global_sequence)
  FROM %1$I.riverbus_event e WHERE e.global_sequence = ANY(p_seqs)
$body$$f$, s);

  -- The repair of events numbered above the sequence (the horizon's
  -- problem event_above_sequence): each gets the sequence's next number,
  -- lowest first, and keeps everything else, so the pools receive it once,
  -- at its new number. Run as the owner, the only role that may UPDATE
  -- riverbus_event.
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.riverbus_event_renumber() RETURNS TABLE (old_sequence bigint, new_sequence bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
  v_last bigint;
  v_horizon bigint;
  v_old bigint;
  v_new bigint;
BEGIN
  -- The xid first, as the assign trigger takes it (docs/design.md §1), and the
  -- lock an INSERT takes before its trigger runs: a new number is missing
  -- until this transaction commits, and the horizon's proof must find this
  -- transaction among the possible writers (those holding this lock,
  -- docs/design.md §2.2) with an xid below the gap's bound.
  PERFORM pg_current_xact_id();
  LOCK TABLE %1$I.riverbus_event IN ROW EXCLUSIVE MODE;
  SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END INTO v_last
    FROM %1$I.riverbus_event_global_sequence q;
  SELECT h.horizon INTO v_horizon FROM %1$I.riverbus_horizon h;
  IF v_last < v_horizon THEN
    RAISE EXCEPTION 'riverbus_event_renumber: riverbus_event_global_sequence (last value %%) is below the horizon (%%): new numbers would be ones no pool reads', v_last, v_horizon
      USING HINT = 'Fix the problem sequence_below_horizon first (README, "What riverbus requires of the sequence and the triggers").';
  END IF;
  PERFORM set_config('riverbus.renumber', 'on', true);
  -- The sequence is read again inside the statement, after its snapshot
  -- was taken: every event that snapshot shows above the sequence's last
  -- value got its number from something else than the sequence.
  FOR v_old IN
    SELECT e.global_sequence FROM %1$I.riverbus_event e
    WHERE e.global_sequence > (SELECT CASE WHEN q.is_called THEN q.last_value ELSE q.last_value - 1 END
                               FROM %1$I.riverbus_event_global_sequence q)
    ORDER BY e.global_sequence
  LOOP
    LOOP
      v_new := nextval(%2$L::regclass);
      -- Another planted number the sequence has reached: that one is
      -- renumbered in its turn; this number is burned.
      EXIT WHEN NOT EXISTS (SELECT 1 FROM %1$I.riverbus_event e WHERE e.global_sequence = v_new);
    END LOOP;
    UPDATE %1$I.riverbus_event SET global_sequence = v_new WHERE global_sequence = v_old;
    old_sequence := v_old;
    new_sequence := v_new;
    RETURN NEXT;
  END LOOP;
  PERFORM set_config('riverbus.renumber', 'off', true);
END
$body$$f$, s, format('%I.riverbus_event_global_sequence', s));
END
$current$;

GRANT EXECUTE ON FUNCTION riverbus_tags_valid(text[]) TO riverbus_app, riverbus_worker;
GRANT EXECUTE ON FUNCTION riverbus_event_assign(), riverbus_event_stamp(), riverbus_event_immutable(),
  riverbus_event_notify(), riverbus_command_assign(), riverbus_event_envelope(bigint[]), riverbus_event_renumber()
  TO riverbus_worker;
