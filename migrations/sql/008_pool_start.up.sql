-- Where a pool's delivery last started: the sequence given to `pool create
-- --from` (the last sequence handed out, for --from now), to `pool reset
-- --to`, or the cursor when `pool update` changed what the pool receives.
--
-- start_after cannot say it: a reset forward keeps start_after where it was
-- (it is LEAST(start_after, N), so late events below N are still awaited
-- from the pool). A transaction-grouped pool needs the real start point: the
-- group it receives is the matching events of a transaction above it, and a
-- group counts as already delivered when one of those events is at or below
-- the cursor (fanout/group.go). A transaction open across the start point
-- is thus delivered from its first event after it, never skipped.
--
-- A table of its own, as checkpoints are: workers reset pools, and 011
-- narrows what they may update in riverbus_pool to the columns a reset
-- needed before this. No row (pools created before this migration, or
-- inserted by hand): the pool's start_after.
CREATE TABLE riverbus_pool_start (
  pool text PRIMARY KEY REFERENCES riverbus_pool (name) ON DELETE CASCADE ON UPDATE CASCADE,
  group_floor bigint NOT NULL CONSTRAINT riverbus_pool_start_group_floor CHECK (group_floor >= 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Read by the fan-out, upserted by ResetPool.
GRANT SELECT, INSERT, UPDATE ON riverbus_pool_start TO riverbus_worker;
