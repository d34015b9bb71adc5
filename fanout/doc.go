// Package fanout configures the stage that turns committed events into River
// jobs, one per event per matching pool, with no leader and no lost or
// duplicated events. The client (package riverbus) runs it; this package
// holds what a user sets: Config, and the BatchResult its OnBatch hook sees.
//
// # Horizon
//
// The horizon is the highest global sequence H such that every sequence up
// to H is visible, proven never to commit, or skipped by the gap timeout and
// watched. A gap (a missing sequence below a visible one) is passed at once
// when a snapshot proves every transaction that could hold it has ended, and
// after Config.GapTimeout otherwise. A skipped sequence that commits later
// is a late event: delivered to every pool that passed it, flagged late.
// docs/design.md §2 gives the proof and what it assumes of the sequence.
//
// # Fan-out
//
// Each pool is fanned out on its own: one batch (at most Config.BatchSize
// events and about Config.BatchBytes of them) reads the pool's events in
// (cursor, H], inserts their jobs and moves the cursor in one transaction.
// The database builds each job's args from the event's row: an event's
// payload never enters the fan-out's memory, however big an appender made
// it. Any number of processes may run the
// fan-out against one database; a pool's batches never overlap (a row lock
// skipped by the others). An event that cannot become a job becomes a dead
// letter of the pool with the reason, and the batch goes on (docs/design.md §3).
package fanout
