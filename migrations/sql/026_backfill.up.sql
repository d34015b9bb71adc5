-- Backfill (issue #25): an application adopting riverbus turns its existing
-- rows into events (outbox.Backfill, `riverbus backfill`), in batches read
-- in id order, one transaction per batch. A backfill's row here is where it
-- stands: the id of the last row it appended (as text, cast back to the
-- id's own type when read), updated in the same transaction as the batch's
-- events, so a run killed at any point and started again resumes after
-- the last batch that committed, and appends each row once. Two runs of
-- one name serialize on this row (FOR UPDATE in each batch's transaction).
--
-- An application role runs backfills: it appends the events, so it keeps
-- the row of its backfill. Nothing of delivery reads or locks this table.
--
-- Older code runs unchanged beside it: only the new code reads the table.
-- riverbus:oldest-code 22
CREATE TABLE riverbus_backfill (
  name text PRIMARY KEY,
  -- The event type of every event the backfill appends; a later run of
  -- the same name must ask for the same.
  type text NOT NULL,
  -- The query of the latest run, for the operator to read back.
  query text NOT NULL,
  -- The id of the last row appended, as text; NULL before the first batch.
  last_id text,
  -- Rows appended as events, and rows found already appended (a run from
  -- the start after this row was lost).
  rows_appended bigint NOT NULL DEFAULT 0,
  rows_already bigint NOT NULL DEFAULT 0,
  started_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  -- When a run last reached the end of the query's rows; a later run goes
  -- on after last_id (rows added since with higher ids) and sets it again.
  finished_at timestamptz,
  CONSTRAINT riverbus_backfill_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
  CONSTRAINT riverbus_backfill_type_length CHECK (char_length(type) BETWEEN 1 AND 255)
);

GRANT SELECT, INSERT, UPDATE ON riverbus_backfill TO riverbus_app;
