-- Where a pool last started: the sequence given to `pool create --from` (or
-- the last sequence handed out, for --from now) and to `pool reset --to`.
--
-- start_after cannot say it: a reset forward keeps start_after where it was
-- (it is LEAST(start_after, N), so late events below N are still awaited
-- from the pool). A transaction-grouped pool needs the real start point: the
-- group it receives is the matching events of a transaction above it, and a
-- group counts as already delivered when one of those events is at or below
-- the cursor (fanout/group.go). A transaction open across the start point
-- is thus delivered from its first event after it, never skipped.
--
-- NULL (pools created before this migration, or inserted by hand): the
-- pool's start_after.
ALTER TABLE riverbus_pool
  ADD COLUMN group_floor bigint CONSTRAINT riverbus_pool_group_floor CHECK (group_floor >= 0);
