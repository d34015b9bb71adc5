// Package checkpoint tracks how far each pool's handlers have got.
//
// A pool's checkpoint is the highest global sequence C such that every job
// of the pool for an event ≤ C is finished (completed, discarded or
// cancelled). Together with the horizon it gives a pool's lag, lets a caller
// wait until its own write has been handled (read-your-writes), and is the
// safe bound below which events may be pruned.
//
// # Sections
//
//   - Computing: Advance, AdvanceAll
//   - Reading: Get, Status, ErrUnknownPool
//   - What holds a checkpoint: GetHolder, Holder, Job
//   - Waiting: WaitFor, WaitOpts
//
// # Computing
//
// Advance computes, in one SQL statement and therefore from one snapshot,
//
//	checkpoint = (lowest global_sequence among the pool's unfinished jobs) − 1
//	             or the pool's cursor when none is unfinished
//
// and stores it in riverbus_pool_checkpoint.checkpoint_seq only when it is higher than
// the stored value: a checkpoint never moves backward. Reading the cursor and
// the jobs in one snapshot matters because the fan-out commits a batch's jobs
// and its cursor move together: a cursor read after a batch committed, paired
// with jobs read before, would claim the batch's unfinished jobs as done.
//
// The lowest unfinished sequence comes from the partial expression index
// riverbus_job_unfinished_sequence on river_job (see
// migrations/sql/002_fanout.up.sql), which holds only unfinished jobs, so the
// cost does not grow with the completed jobs River keeps around. The
// expression in queries.go is textually identical to the index's.
//
// A job that turns unfinished again below the stored checkpoint — a retried
// dead letter, or a late event fanned out after its gap timed out — does not
// pull the checkpoint back; the checkpoint resumes moving forward once
// everything above it is finished.
//
// Nothing advances checkpoints by itself: call Advance or AdvanceAll
// periodically (the riverbus process does), or WaitFor, which advances while
// it waits.
//
// # Reading
//
// Get returns the stored horizon, cursor and checkpoint of a pool and its
// lag, without advancing anything. A pool name that does not exist gives an
// error wrapping ErrUnknownPool whose message lists the pools that do.
//
// # What holds a checkpoint
//
// GetHolder names the job that keeps a pool's checkpoint where it is: the
// pool's unfinished job of the lowest sequence (the same index probe as
// Advance), with its state, attempt and maximum attempts, the time of its
// next attempt and its last error. A job retried with backoff holds the
// checkpoint, and so the pool's lag grows, until it succeeds or becomes a
// dead letter. In an ordered pool the holder may be a pending job waiting
// for its lane; Holder.LaneBlocker then names what the lane waits for: the
// lane's job in flight or, with --on-dead-letter block, its dead letter.
// `riverbus status` and the metrics show it.
//
// # Waiting
//
// WaitFor blocks until a pool's checkpoint reaches a global sequence, for
// example the one Append returned, advancing the checkpoint every
// WaitOpts.PollInterval. Bound it with the context.
package checkpoint
