-- Skipped sequences as ranges, late events as rows of their own, and a clear
-- error when the horizon row is missing (fanout/horizon.go explains the
-- rules).
--
-- Before: riverbus_skipped held one row per skipped sequence, so a sequence
-- jump (setval far ahead) or an appender burning numbers in a transaction
-- held open cost one row, and one loop iteration in the horizon round, per
-- missing number. Now a timed-out gap is one row per run of missing numbers
-- whatever its length, and only events that really commit inside a run cost
-- a row (in riverbus_late).

ALTER TABLE riverbus_skipped RENAME TO riverbus_skipped_v1;

-- Runs of sequences the horizon passed by timeout while they were missing.
-- Ranges never overlap. A committed event inside a range is a late event;
-- the range is deleted (forgotten) once every transaction that could still
-- hold one of its sequences has ended, after its committed events were
-- recorded in riverbus_late.
CREATE TABLE riverbus_skipped (
  first_sequence bigint PRIMARY KEY,
  last_sequence bigint NOT NULL,
  xid_bound xid8 NOT NULL,
  skipped_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT riverbus_skipped_range CHECK (last_sequence >= first_sequence)
);

-- Late events: committed events whose sequence the horizon had skipped.
-- Retired once every pool that should see the event has handled it
-- (riverbus_pool_late) and no skipped range covers it any more.
CREATE TABLE riverbus_late (
  sequence bigint PRIMARY KEY,
  late_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO riverbus_late (sequence, late_at)
SELECT sequence, late_at FROM riverbus_skipped_v1 WHERE late_at IS NOT NULL;

-- Consecutive skipped sequences with one bound become one range.
INSERT INTO riverbus_skipped (first_sequence, last_sequence, xid_bound, skipped_at)
SELECT min(sequence), max(sequence), xid_bound, min(skipped_at)
FROM (
  SELECT sequence, xid_bound, skipped_at,
    sequence - row_number() OVER (PARTITION BY xid_bound ORDER BY sequence) AS run
  FROM riverbus_skipped_v1 WHERE late_at IS NULL
) s
GROUP BY xid_bound, run;

-- riverbus_pool_late referred to the per-sequence rows. A pool may now
-- record an event it handled before a round has marked it late (it is found
-- inside a range), so the record refers to no table; the retirement of a
-- late event deletes its records (fanout.RetireLateEvents).
ALTER TABLE riverbus_pool_late DROP CONSTRAINT IF EXISTS riverbus_pool_late_sequence_fkey;
DROP TABLE riverbus_skipped_v1;

-- A negative horizon is damage, not a state.
ALTER TABLE riverbus_horizon ADD CONSTRAINT riverbus_horizon_nonnegative CHECK (horizon >= 0);

-- Called where the fan-out reads the horizon, so a missing row stops it with
-- an error that says what to do instead of "no rows in result set".
CREATE FUNCTION riverbus_horizon_missing() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'riverbus_horizon has no row: the horizon cannot move and no pool is fanned out'
    USING ERRCODE = 'no_data_found',
      HINT = 'Recreate it with "riverbus repair horizon" (fanout.RepairHorizon), as the schema owner; it is safe while riverbus runs.';
END
$$;

-- Grants (migration 004): ranges are recorded and forgotten, never updated;
-- late events are recorded and retired; a retirement deletes the pools'
-- records of the event.
GRANT SELECT, INSERT, DELETE ON riverbus_skipped TO riverbus_worker;
GRANT SELECT, INSERT, DELETE ON riverbus_late TO riverbus_worker;
GRANT DELETE ON riverbus_pool_late TO riverbus_worker;
GRANT EXECUTE ON FUNCTION riverbus_horizon_missing() TO riverbus_worker;
