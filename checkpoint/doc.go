// Package checkpoint explains how far each pool's handlers have got, and
// names what riverbus.Client's CheckpointX methods return.
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
// A started riverbus.Client advances every pool's checkpoint each
// Config.CheckpointInterval; any number of processes may do so.
//
// # Reading
//
// Client.CheckpointGet advances a pool's checkpoint and returns it with the
// horizon, the pool's cursor and its lag (a Status). A pool name that
// does not exist gives an error wrapping bustype.ErrUnknownPool whose
// message lists the pools that do.
//
// # What holds a checkpoint
//
// Client.CheckpointHolder names the job that keeps a pool's checkpoint where
// it is: the pool's unfinished job of the lowest sequence, with its state,
// attempt and maximum attempts, the time of its next attempt and its last
// error. A job retried with backoff holds the checkpoint, and so the pool's
// lag grows, until it succeeds or becomes a dead letter. In an ordered pool
// the holder may be a pending job waiting for its lane; Holder.LaneBlocker
// then names what the lane waits for: the lane's job in flight or, in a pool
// whose OnDeadLetter is bustype.DeadLetterBlock, its dead letter.
// `riverbus status` and the metrics show it.
//
// # Waiting
//
// Client.CheckpointWait blocks until a pool's checkpoint reaches a global
// sequence, for example the one an append returned, advancing the checkpoint
// every WaitOpts.PollInterval. Bound it with the context.
package checkpoint
