// Package retention deletes old events from riverbus_event under the
// operator's policy (docs/operations.md "Event retention", docs/design.md §8).
//
// # Rules
//
// The rules are in the database (migration 015), so that every caller
// follows them and a worker login can run retention without the right to
// delete events: riverbus_retention_holds lists what holds the floor (the
// horizon, every pool's checkpoint, paused or not, the lowest skipped
// range, the lowest late event, the lowest undeliverable dead letter), and
// riverbus_retention_step covers one batch of events above the policy's
// trimmed_through and at or below the floor, stopping at the first event
// younger than the keep period or whose transaction has an event above the
// floor; with apply it deletes them and moves trimmed_through.
//
// # Batches
//
// A step reads at most BatchSize events through the primary key and
// deletes them by range in one short transaction, so its cost does not
// grow with the table and memory stays bounded. Trim stops between any two
// steps (Ctrl-C, MaxBatches) and resumes at trimmed_through.
//
// # Races
//
// A step holds riverbus_retention_lock from before it reads the floor
// until it commits; pool create and reset take it too (StartFloor) before
// they read trimmed_through, so a reset to the beginning either happens
// first and holds the floor, or after and starts at the new beginning.
package retention
