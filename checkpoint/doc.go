// Package checkpoint computes how far each pool's handlers have got, names
// the job that holds a pool back, and holds what riverbus.Client's
// CheckpointX methods return (Status, Holder, Job, WaitOpts). Holder and Job
// are also what riverbus.Client.Status reports for each pool
// (StatusPool.Holder), so one type answers "what holds the pool" wherever it
// is asked; their JSON is that of `riverbus status --json`. The client runs
// the Advancer while started and answers the CheckpointX methods with Get,
// GetHolder and WaitFor; docs/design.md explains why the checkpoint is safe
// to prune below.
//
// A pool's checkpoint is the highest global sequence C such that every job
// of the pool for an event ≤ C is finished (completed, discarded as a dead
// letter, or cancelled). Together with the horizon it gives a pool's lag,
// lets a caller wait until its own write has been handled (read-your-writes),
// and is the safe bound below which events may be pruned.
//
// # Sections
//
//   - Computing: how the checkpoint moves
//   - Reading: Client.CheckpointGet, Status
//   - What holds a checkpoint: Client.CheckpointHolder, Holder, Job
//   - Waiting: Client.CheckpointWait, WaitOpts
//
// # Computing
//
// The checkpoint is the lowest sequence among the pool's unfinished jobs,
// minus one, or the pool's cursor when none is unfinished; both are read from
// one snapshot, so a fan-out batch committed in between cannot be taken as
// done. It only moves forward: a job that turns unfinished again below it —
// a retried dead letter, or a late event fanned out after its gap timed out
// — does not pull it back; it resumes moving once everything above it is
// finished.
//
// Advance computes it in one SQL statement, so from one snapshot, and stores
// it in riverbus_pool_checkpoint.checkpoint_seq only when it is higher than
// the stored value. Reading the cursor and the jobs in one snapshot matters
// because the fan-out commits a batch's jobs and its cursor move together: a
// cursor read after a batch committed, paired with jobs read before, would
// claim the batch's unfinished jobs as done. The lowest unfinished sequence
// comes from the partial expression index riverbus_job_unfinished_sequence
// on river_job (migrations/sql/002_fanout.up.sql), which holds only
// unfinished jobs, so the cost does not grow with the completed jobs River
// keeps around; the expression in queries.go is textually identical to the
// index's. Checkpoints live in their own table, so storing one never locks
// the pool row the fan-out locks.
//
// A started riverbus.Client runs an Advancer, which advances every pool's
// checkpoint (AdvanceAll) each Config.CheckpointInterval; any number of
// processes may do so.
//
// # Reading
//
// Client.CheckpointGet advances a pool's checkpoint and returns it with the
// horizon, the pool's cursor and its lag (a Status, read by Get). A pool name that
// does not exist gives an error wrapping bustype.ErrUnknownPool whose
// message lists the pools that do.
//
// # What holds a checkpoint
//
// Client.CheckpointHolder (GetHolder) names the job that keeps a pool's
// checkpoint where it is: the pool's unfinished job of the lowest sequence, with its state,
// attempt and maximum attempts, the time of its next attempt and its last
// error. A job retried with backoff holds the checkpoint, and so the pool's
// lag grows, until it succeeds or becomes a dead letter. In an ordered pool
// the holder may be a pending job waiting for its lane; Holder.LaneBlocker
// then names what the lane waits for: the lane's job in flight or, in a pool
// whose OnDeadLetter is bustype.DeadLetterBlock, its dead letter.
// `riverbus status` and the metrics show it.
//
// Holder.Stuck says when a holder is worth an operator's attention: it, or
// what blocks its lane, has failed, waits for a retry or is a dead letter
// (Job.Troubled), or the checkpoint has stood still for StuckAfter.
// Holder.Stalled says when its failure stalls the pool (StalledAfter), and
// Job.NextAttempt with Holder.Until when the next attempt comes, by the
// database's clock.
//
// # Waiting
//
// Client.CheckpointWait (WaitFor) blocks until a pool's checkpoint reaches a global
// sequence, for example the one an append returned, advancing the checkpoint
// every WaitOpts.PollInterval. Bound it with the context.
package checkpoint
