package checkpoint

import (
	"time"

	"github.com/riverbus/riverbus/bustype"
)

// Status is where a pool stands: how far the log is proven (Horizon),
// fanned out to the pool (Cursor) and handled by it (Checkpoint).
type Status struct {
	// Pool is the pool's name.
	Pool string
	// Horizon is the global horizon: every sequence ≤ Horizon is visible or
	// will never commit. It is shared by all pools.
	Horizon int64
	// Cursor: every event ≤ Cursor has been turned into a job of the pool
	// (or filtered out).
	Cursor int64
	// Checkpoint: every job of the pool for an event ≤ Checkpoint is
	// finished (completed, cancelled, or discarded as a dead letter).
	Checkpoint int64
	// Lag is Horizon − Checkpoint, or 0 when the checkpoint is ahead of the
	// horizon (a pool created to start after a future sequence).
	Lag int64
}

// Job is a job of a pool as a Holder reports it: a River job, or a dead
// letter kept in riverbus_dead_letter.
type Job struct {
	// ID is the River job id (a dead letter keeps the id of its job).
	ID int64
	// Sequence is the global sequence of the job's event.
	Sequence int64
	// State is River's state of the job; bustype.JobStateDiscarded for a
	// dead letter.
	State bustype.JobState
	// DeadLetter is true for a dead letter: a job River discarded after its
	// last attempt, kept until an operator retries or purges it.
	DeadLetter bool
	// Attempt is the number of attempts so far; MaxAttempts the most River
	// makes before the job becomes a dead letter.
	Attempt, MaxAttempts int
	// ScheduledAt is River's scheduled_at: for a retryable or scheduled job,
	// the time of its next attempt. Zero for a dead letter.
	ScheduledAt time.Time
	// DiscardedAt is when a dead letter was discarded; zero otherwise.
	DiscardedAt time.Time
	// LastError is the error of the job's last failed attempt, "" when
	// none failed. It is the handler's text: escape it before printing it
	// to a terminal.
	LastError string
	// Lane is the lane (the event's key, or "" in a globally ordered pool)
	// of a job of an ordered pool; nil in other pools.
	Lane *string
}

// Holder is what holds a pool's checkpoint: the pool's unfinished job of
// the lowest sequence. The checkpoint cannot pass Sequence−1 until it
// finishes (completed, cancelled, or discarded as a dead letter).
type Holder struct {
	Job
	// HeldSince is when the checkpoint last moved, or when the job was
	// created if that is later: the checkpoint has stood still at least
	// since then.
	HeldSince time.Time
	// At is the database's clock when the holder was read; compare
	// HeldSince and ScheduledAt with it rather than the local clock.
	At time.Time
	// LaneBlocker is set for a pending job (a job of an ordered pool that
	// waits for its lane): what the lane waits for, its job in flight or,
	// in a pool whose OnDeadLetter is bustype.DeadLetterBlock, its dead letter. Nil
	// when nothing blocks the lane (it is being handed on).
	LaneBlocker *Job
}

// HeldFor is how long the checkpoint has stood still: At − HeldSince, or 0.
func (h *Holder) HeldFor() time.Duration {
	return max(h.At.Sub(h.HeldSince), 0)
}

// StuckAfter is how long a pool's checkpoint may stand still behind a job
// that has not failed before Holder.Stuck calls it stuck (a handler that
// hangs, a worker that is not running). riverbus.Status applies it to the
// jobs River shows running and to a horizon that does not move as well.
const StuckAfter = time.Minute

// StalledAfter is how long a failed job must have held a pool's
// checkpoint, or must wait for its next attempt, before Holder.Stalled says
// it stalls the pool (riverbus.PoolConditionStalled). It is shorter than
// StuckAfter: a failed job needs no time to be noticed, only enough that a
// retry within seconds does not count.
const StalledAfter = 10 * time.Second

// NextAttempt returns the time of the job's next attempt, ScheduledAt, and
// true for a retryable or scheduled job; false otherwise, where ScheduledAt
// is no attempt to wait for (an available job's is when it became
// available).
func (j *Job) NextAttempt() (time.Time, bool) {
	if (j.State == bustype.JobStateRetryable || j.State == bustype.JobStateScheduled) && !j.ScheduledAt.IsZero() {
		return j.ScheduledAt, true
	}
	return time.Time{}, false
}

// Troubled reports whether the job has failed, waits for a retry, or is a
// dead letter: a reason to look at it, however briefly it has held.
func (j *Job) Troubled() bool {
	return j.DeadLetter || j.LastError != "" || j.State == bustype.JobStateRetryable || j.State == bustype.JobStateScheduled
}

// Until is how long from At, when the holder was read, until t, by the
// database's clock: "next attempt in 20s" for a job's NextAttempt, right
// however far the local clock is off.
func (h *Holder) Until(t time.Time) time.Duration {
	return t.Sub(h.At)
}

// Blocker is the job to look at: what blocks the holder's lane, or else the
// holder itself.
func (h *Holder) Blocker() *Job {
	if h.LaneBlocker != nil {
		return h.LaneBlocker
	}
	return &h.Job
}

// Stuck reports whether the holder, or what blocks its lane, is Troubled,
// or the checkpoint has stood still for StuckAfter: the holder is worth an
// operator's attention (`riverbus status` names it then).
func (h *Holder) Stuck() bool {
	return h.HeldFor() >= StuckAfter || h.Troubled() || (h.LaneBlocker != nil && h.LaneBlocker.Troubled())
}

// Stalled reports whether the holder stalls its pool: the job to look at
// (Blocker) has failed, and it is a dead letter, or the checkpoint has
// stood still for StalledAfter, or its next attempt is that far away. A
// job that failed once and is retried within seconds does not stall its
// pool.
func (h *Holder) Stalled() bool {
	b := h.Blocker()
	if !b.Troubled() {
		return false
	}
	next, ok := b.NextAttempt()
	return b.DeadLetter || h.HeldFor() >= StalledAfter || (ok && h.Until(next) >= StalledAfter)
}

// WaitOpts are the optional settings of waiting for a pool's checkpoint to
// reach a sequence (WaitFor, riverbus.Client.CheckpointWait). A nil
// *WaitOpts means the defaults.
type WaitOpts struct {
	// PollInterval is how long the wait sleeps between two advances of the
	// checkpoint. Zero means WaitPollIntervalDefault; negative is
	// an error.
	PollInterval time.Duration
}

// WaitPollIntervalDefault is the default of WaitOpts.PollInterval.
const WaitPollIntervalDefault = 20 * time.Millisecond
