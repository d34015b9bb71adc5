// Package fanout turns committed events into River jobs, one per event per
// matching pool, with no leader and no lost or duplicated events.
//
// # Horizon
//
// The horizon is the highest global sequence H such that every sequence up
// to H is visible, proven never to commit, or skipped by the gap timeout
// and watched. AdvanceHorizon moves it one round; whichever instance gets
// the round's lock (a table lock only riverbus_worker may take) does the
// round and the others skip it. A gap
// (a missing sequence below a visible one) is passed at once when the
// snapshot proves every transaction that could hold it has ended, and
// after fanout.Config.GapTimeout otherwise. Gaps and skipped sequences are kept as
// ranges, so a gap costs the same whatever its length. A skipped sequence
// that commits later is a late event: delivered to every pool that passed
// it, flagged late.
//
// The proof assumes a sequence with CACHE 1, INCREMENT BY 1, NO CYCLE and
// its next number above the horizon, and the assign trigger of migration
// 001 in place. Each round checks them; while one is broken it proves and
// skips nothing. CheckAssumptions reports them. RepairHorizon recreates a
// deleted horizon row.
//
// # Pools
//
// A pool is a named consumer group (CreatePool): its name is the River job
// kind, and every event matching its type and tag filters becomes one job.
// A transaction-grouped pool (bustype.GroupTransaction) gets one job per
// application transaction instead, holding its matching events after the
// pool's start point, cut into parts when it is very large (group.go).
//
// # Fan-out
//
// FanOutPool runs one batch of one pool in one transaction: lock the pool
// row FOR UPDATE SKIP LOCKED, read its events in (cursor, H], insert their
// jobs, move the cursor, commit. An event that cannot become a job (JSON
// nested too deep for encoding/json, an envelope too big for jsonb) becomes
// a dead letter of the pool with the reason, and the batch goes on.
// Fanout.Run advances the horizon in one loop and fans out each pool in
// another, woken by LISTEN riverbus_event, by each move of the horizon and
// by a poll interval; each pool's failures back off on their own.
package engine
