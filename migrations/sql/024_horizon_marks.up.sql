-- Rewind a pool to a time (issue #25): `riverbus pool reset P --to-time T`
-- re-delivers every event committed after T. appended_at (019) cannot say
-- that: it is when the appending transaction began, and a transaction that
-- began before T may commit after it, with a lower sequence than events
-- appended after T. What riverbus does know is when events committed by:
-- each horizon round sees them in its snapshot. So the round that moves the
-- horizon records, at most every few seconds, a mark: a time `at`, taken
-- after the round's snapshot, and committed_through, the horizon it wrote
-- (below any skipped range still watched). Every event at or below
-- committed_through had committed before `at`, or never will; so an event
-- committed after T is above the committed_through of every mark at or
-- before T, and a rewind to T resets the pool to the latest such mark
-- (docs/design.md §11).
--
-- n numbers the marks, so the round can hold them to a cap by deleting the
-- oldest without counting the table. Retention deletes the marks below
-- where the log begins with the events (riverbus_retention_step,
-- sql/current/05_retention.sql).
--
-- Older code runs unchanged beside it: it writes no marks, which only makes
-- rewinds reach further back (they re-deliver more, never less).
-- riverbus:oldest-code 22
CREATE TABLE riverbus_horizon_mark (
  at timestamptz PRIMARY KEY,
  committed_through bigint NOT NULL,
  n bigint GENERATED ALWAYS AS IDENTITY
);

-- The fan-out's round writes marks and holds them to the cap; operators'
-- resets and status read them. Only riverbus_worker does either.
GRANT SELECT, INSERT, DELETE ON riverbus_horizon_mark TO riverbus_worker;

-- The first mark, now: the horizon as committed is a mark of its own (every
-- event at or below it was in the snapshot of the round that wrote it,
-- which committed before this read). Rewinds are exact from here on; the
-- history before it has no commit times. A fresh install marks 0.
INSERT INTO riverbus_horizon_mark (at, committed_through)
SELECT clock_timestamp(), LEAST(h.horizon, (SELECT min(s.first_sequence) - 1 FROM riverbus_skipped s))
FROM riverbus_horizon h;
