-- riverbus event log: the contract applications and the fan-out rely on.
-- See docs/design.md §1: the trigger takes the transaction id before the
-- sequence number, which is what makes gaps provable.

CREATE SEQUENCE riverbus_event_global_sequence AS bigint CACHE 1;

-- A tag is name=value with a non-empty name, at most 1024 bytes; NULL
-- elements are rejected.
CREATE FUNCTION riverbus_tags_valid(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(bool_and(t IS NOT NULL AND t ~ '^[^=]+=' AND octet_length(t) <= 1024), true) FROM unnest(tags) AS t
$$;

CREATE TABLE riverbus_event (
  global_sequence bigint PRIMARY KEY,
  event_id uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
  type text NOT NULL CONSTRAINT riverbus_event_type_length CHECK (char_length(type) BETWEEN 1 AND 255),
  key text NOT NULL DEFAULT '' CONSTRAINT riverbus_event_key_length CHECK (octet_length(key) <= 1024),
  tags text[] NOT NULL DEFAULT '{}' CONSTRAINT riverbus_event_tags_valid CHECK (riverbus_tags_valid(tags)),
  data jsonb NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}' CONSTRAINT riverbus_event_metadata_object CHECK (jsonb_typeof(metadata) = 'object'),
  transaction_id xid8 NOT NULL,
  occurred_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX riverbus_event_type_sequence ON riverbus_event (type, global_sequence);
CREATE INDEX riverbus_event_key_sequence ON riverbus_event (key, global_sequence);
CREATE INDEX riverbus_event_tags ON riverbus_event USING gin (tags);
CREATE INDEX riverbus_event_transaction ON riverbus_event (transaction_id, global_sequence);

-- Every insert path (Go, psql, COPY) goes through this trigger, and whatever
-- the inserter put in these two columns is overwritten.
CREATE FUNCTION riverbus_event_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- The order is the point: the xid first, then the sequence number.
  NEW.transaction_id := pg_current_xact_id();
  NEW.global_sequence := nextval('riverbus_event_global_sequence');
  RETURN NEW;
END
$$;

CREATE TRIGGER riverbus_event_assign BEFORE INSERT ON riverbus_event
  FOR EACH ROW EXECUTE FUNCTION riverbus_event_assign();

-- The log is append-only in the columns the fan-out relies on.
CREATE FUNCTION riverbus_event_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.global_sequence <> OLD.global_sequence OR NEW.transaction_id <> OLD.transaction_id THEN
    RAISE EXCEPTION 'riverbus_event: global_sequence and transaction_id cannot be changed';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER riverbus_event_immutable BEFORE UPDATE ON riverbus_event
  FOR EACH ROW EXECUTE FUNCTION riverbus_event_immutable();

-- NOTIFY is only a wake-up, never the data: one per statement.
CREATE FUNCTION riverbus_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('riverbus_event', '');
  RETURN NULL;
END
$$;

CREATE TRIGGER riverbus_event_notify AFTER INSERT ON riverbus_event
  FOR EACH STATEMENT EXECUTE FUNCTION riverbus_event_notify();

-- The command that caused a transaction's events (optional audit record).
CREATE TABLE riverbus_command (
  transaction_id xid8 PRIMARY KEY DEFAULT pg_current_xact_id(),
  type text NOT NULL CONSTRAINT riverbus_command_type_length CHECK (char_length(type) BETWEEN 1 AND 255),
  data jsonb NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}' CONSTRAINT riverbus_command_metadata_object CHECK (jsonb_typeof(metadata) = 'object'),
  occurred_at timestamptz NOT NULL DEFAULT now()
);
