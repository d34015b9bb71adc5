// Package checkpoints computes, stores and reads the pools' checkpoints, and
// names the job that holds one. The client runs the checkpoint advancer
// (internal/engine's CheckpointAdvancer, which calls AdvanceAll) and answers
// the operator's CheckpointX methods with it; package checkpoint explains
// checkpoints to users.
//
// # Computing
//
// Advance computes, in one SQL statement and therefore from one snapshot,
//
//	checkpoint = (lowest global_sequence among the pool's unfinished jobs) − 1
//	             or the pool's cursor when none is unfinished
//
// and stores it in riverbus_pool_checkpoint.checkpoint_seq only when it is
// higher than the stored value: a checkpoint never moves backward. Reading
// the cursor and the jobs in one snapshot matters because the fan-out
// commits a batch's jobs and its cursor move together: a cursor read after a
// batch committed, paired with jobs read before, would claim the batch's
// unfinished jobs as done.
//
// The lowest unfinished sequence comes from the partial expression index
// riverbus_job_unfinished_sequence on river_job (see
// migrations/sql/002_fanout.up.sql), which holds only unfinished jobs, so
// the cost does not grow with the completed jobs River keeps around. The
// expression in queries.go is textually identical to the index's.
//
// Checkpoints live in their own table, so storing one never locks the pool
// row the fan-out locks.
//
// # Holder
//
// GetHolder reads the pool's unfinished job of the lowest sequence (the same
// index probe as Advance) and, for a pending job of an ordered pool, what
// its lane waits for: the lane's job in flight or, in a pool that blocks on
// dead letters, its lowest dead letter.
package checkpoints
