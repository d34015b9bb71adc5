package riverbus

import (
	"context"
	"slices"
	"time"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pools"
)

// PoolCreate creates a pool and reports whether it was created. A pool that
// exists with the same settings is returned as it is; with other settings
// the error wraps bustype.ErrPoolExists (use PoolUpdate). An invalid setting
// gives an error wrapping bustype.ErrInvalidPool that names it; a From
// beyond the end of the log is a *bustype.StartBeyondLogError.
func (c *Client) PoolCreate(ctx context.Context, params bustype.PoolParams) (*bustype.Pool, bool, error) {
	params.Update = false
	return pools.Create(ctx, c.db, params)
}

// PoolUpdateParams are the settings PoolUpdate changes. Zero fields (nil
// slices) keep the pool's current setting.
type PoolUpdateParams struct {
	Queue        string
	EventTypes   *[]string // a pointer to an empty slice clears the filter
	Tags         *[]string // a pointer to an empty slice clears the filter
	MaxAttempts  int
	Priority     int
	Ordering     bustype.Ordering
	OnDeadLetter bustype.DeadLetterPolicy
	Grouping     bustype.Grouping
	// Retry changes the fields of the pool's retry schedule that are not
	// zero; Retry.Jitter -1 turns jitter off.
	Retry bustype.RetrySchedule
}

// PoolUpdate changes the settings of an existing pool; the settings params
// leaves zero keep their values. Its cursor and start point stay where they
// are; a change of filter, ordering or grouping applies from the cursor on.
// A new retry schedule applies to the failures that follow, once the River
// clients working the pool have refreshed their copy of the pool settings
// (within RetryRefreshInterval); a job already waiting for its retry keeps
// its time.
func (c *Client) PoolUpdate(ctx context.Context, name string, params PoolUpdateParams) (*bustype.Pool, error) {
	p, err := pools.Get(ctx, c.db, name)
	if err != nil {
		return nil, err
	}
	merged := bustype.PoolParams{
		Name: name, Queue: p.Queue, EventTypes: p.EventTypes, Tags: p.Tags, MaxAttempts: p.MaxAttempts,
		Priority: p.Priority, Ordering: p.Ordering, OnDeadLetter: p.OnDeadLetter, Grouping: p.Grouping, Retry: p.Retry, Update: true,
	}
	if merged.Retry.Jitter == 0 {
		merged.Retry.Jitter = -1 // none, where 0 in params is the default
	}
	if params.Retry.Base != 0 {
		merged.Retry.Base = params.Retry.Base
	}
	if params.Retry.Factor != 0 {
		merged.Retry.Factor = params.Retry.Factor
	}
	if params.Retry.MaxDelay != 0 {
		merged.Retry.MaxDelay = params.Retry.MaxDelay
	}
	if params.Retry.Jitter != 0 {
		merged.Retry.Jitter = params.Retry.Jitter
	}
	if params.Queue != "" {
		merged.Queue = params.Queue
	}
	if params.EventTypes != nil {
		merged.EventTypes = slices.Clone(*params.EventTypes)
	}
	if params.Tags != nil {
		merged.Tags = slices.Clone(*params.Tags)
	}
	if params.MaxAttempts != 0 {
		merged.MaxAttempts = params.MaxAttempts
	}
	if params.Priority != 0 {
		merged.Priority = params.Priority
	}
	if params.Ordering != "" {
		merged.Ordering = params.Ordering
	}
	if params.OnDeadLetter != "" {
		merged.OnDeadLetter = params.OnDeadLetter
	}
	if params.Grouping != "" {
		merged.Grouping = params.Grouping
	}
	updated, _, err := pools.Create(ctx, c.db, merged)
	return updated, err
}

// EventTypesAbsent returns those of types no event in the log has, none
// appended yet or retention deleted them all, in order: a pool filtered on
// such a type (a typo, say) receives nothing until one is appended. It costs
// one index probe per type, whatever the log's size.
func (c *Client) EventTypesAbsent(ctx context.Context, types []string) ([]string, error) {
	return pools.EventTypesAbsent(ctx, c.db, types)
}

// PoolGet returns one pool; an unknown name gives an error wrapping
// bustype.ErrUnknownPool that lists the pools that exist.
func (c *Client) PoolGet(ctx context.Context, name string) (*bustype.Pool, error) {
	return pools.Get(ctx, c.db, name)
}

// PoolList returns every pool, by name.
func (c *Client) PoolList(ctx context.Context) ([]*bustype.Pool, error) {
	return pools.List(ctx, c.db)
}

// PoolStatusChange is what PoolPause and PoolResume did.
type PoolStatusChange struct {
	Pool *bustype.Pool
	// QueueShared is true when other pools share the pool's River queue:
	// only the fan-out changed, the queue's workers go on.
	QueueShared bool
}

// PoolPause stops a pool's fan-out and, when no other pool shares its River
// queue, its handlers (workers finish the jobs they hold and fetch no
// more). Nothing is lost: PoolResume continues where it stopped.
func (c *Client) PoolPause(ctx context.Context, name string) (*PoolStatusChange, error) {
	return c.setPoolStatus(ctx, name, bustype.PoolPaused)
}

// PoolResume undoes PoolPause.
func (c *Client) PoolResume(ctx context.Context, name string) (*PoolStatusChange, error) {
	return c.setPoolStatus(ctx, name, bustype.PoolActive)
}

func (c *Client) setPoolStatus(ctx context.Context, name string, status bustype.PoolStatus) (*PoolStatusChange, error) {
	p, shared, err := pools.SetStatus(ctx, c.db, name, status)
	if err != nil {
		return nil, err
	}
	return &PoolStatusChange{Pool: p, QueueShared: shared}, nil
}

// PoolReset moves a pool's cursor and checkpoint to after sequence to, so
// every later event is delivered again (rebuilding a projection). Jobs
// already created are left alone. After event retention deleted old
// events, to 0 means where the log begins (RetentionPolicy.TrimmedThrough),
// and any other to below it is refused with an error wrapping
// bustype.ErrInvalidPool. A to beyond the end of the log (the last sequence
// handed out, or the horizon when higher) is refused with a
// *bustype.StartBeyondLogError, which wraps bustype.ErrInvalidPool: the
// pool would skip the events appended next. To wait for the events to be
// delivered again and learn which became dead letters, use
// PoolReplayStart and PoolReplayWait.
func (c *Client) PoolReset(ctx context.Context, name string, to int64) (*bustype.Pool, error) {
	return pools.Reset(ctx, c.db, name, to)
}

// PoolRewind is where a reset of a pool to a time (PoolResetToTime) put
// it.
type PoolRewind struct {
	// Pool is the pool as the reset left it.
	Pool *bustype.Pool
	// After is the position the time resolved to: every event above it is
	// fanned out again, and every event committed after the time is above
	// it.
	After int64
	// MarkAt is when the horizon recorded After as committed: the latest
	// such record at or before the time. The events committed between
	// MarkAt and the time are delivered again too (at least once: a
	// few seconds' worth, see fanout.Config.MarkInterval).
	MarkAt time.Time
}

// PoolResetToTime resets a pool as PoolReset does, to the position of a
// time: every event committed after t is delivered again, an event of a
// transaction that began before t and committed after it included
// (docs/design.md §11). The time is the database's, as it records commits,
// not an event's occurred_at. A t after the database's clock, before the
// first event the log keeps, or before riverbus began recording commit
// times (the upgrade to this version, or the oldest record retention kept)
// is refused with a *bustype.RewindTimeError, which wraps
// bustype.ErrInvalidPool and says where the log begins and ends. To wait
// for the replay, use PoolReplayStartToTime.
func (c *Client) PoolResetToTime(ctx context.Context, name string, t time.Time) (*PoolRewind, error) {
	r, err := pools.ResetReplayToTime(ctx, c.db, name, t)
	if err != nil {
		return nil, err
	}
	return &PoolRewind{Pool: r.Pool, After: r.After, MarkAt: r.MarkAt}, nil
}

// PoolDeleteOpts are the optional settings of PoolDelete.
type PoolDeleteOpts struct {
	// Force deletes a pool that has unfinished jobs, with its jobs that are
	// not running and its dead letters. Without it such a pool is refused
	// with bustype.ErrPoolBusy.
	Force bool
}

// PoolDelete deletes a pool.
func (c *Client) PoolDelete(ctx context.Context, name string, opts *PoolDeleteOpts) error {
	return pools.Delete(ctx, c.db, name, opts != nil && opts.Force)
}

// DeadLetterList returns the dead letters params selects, in job id order,
// a page at a time: pass the last JobID of a page as the next page's
// AfterJobID. A Limit out of range gives an error that names it.
func (c *Client) DeadLetterList(ctx context.Context, params bustype.DeadLetterListParams) ([]bustype.DeadLetter, error) {
	return deadletters.List(ctx, c.db, params)
}

// DeadLetterGet returns the dead letter of job jobID; an id that is not a
// dead letter gives an error wrapping bustype.ErrDeadLetterNotFound.
func (c *Client) DeadLetterGet(ctx context.Context, jobID int64) (*bustype.DeadLetter, error) {
	return deadletters.Get(ctx, c.db, jobID)
}

// DeadLetterRetry puts the dead letter of job jobID back to work and removes
// it, in one transaction: a discarded River job still there is made
// available again as River's JobRetry would; one River's cleaner deleted is
// inserted anew; a job of an ordered pool goes back in line in its lane. The
// result's Action says which (see bustype.RetryAction). River's producers
// are notified on commit; no started Client is needed.
//
// The dead letter of an event the fan-out could not turn into a job gets
// its envelope rebuilt from riverbus_event (repair the row first); when it
// still cannot be encoded the dead letter stays, the Action is
// bustype.RetryUndeliverable and the error wraps bustype.ErrUndeliverable.
// An id that is not a dead letter gives an error wrapping
// bustype.ErrDeadLetterNotFound.
func (c *Client) DeadLetterRetry(ctx context.Context, jobID int64) (bustype.DeadLetterRetryResult, error) {
	return deadletters.Retry(ctx, c.db, jobID)
}

// DeadLetterRetryPool retries every dead letter of pool as DeadLetterRetry
// does, in one transaction, so that River works them again in global
// sequence order (dead letters without a sequence last). It returns what it
// did with each, in that order (undeliverable ones, left, at the end); none
// for a pool without dead letters.
func (c *Client) DeadLetterRetryPool(ctx context.Context, pool string) ([]bustype.DeadLetterRetryResult, error) {
	return deadletters.RetryPool(ctx, c.db, pool)
}

// DeadLetterPurge gives up on the dead letter of job jobID: it deletes it
// and its River job if that is still discarded, and frees the lane it held
// in an ordered pool. An id that is not a dead letter gives an error
// wrapping bustype.ErrDeadLetterNotFound.
func (c *Client) DeadLetterPurge(ctx context.Context, jobID int64) error {
	return deadletters.Purge(ctx, c.db, jobID)
}

// DeadLetterPurgePool purges every dead letter of pool as DeadLetterPurge
// does and returns how many there were.
func (c *Client) DeadLetterPurgePool(ctx context.Context, pool string) (int, error) {
	return deadletters.PurgePool(ctx, c.db, pool)
}

// CheckpointGet advances a pool's checkpoint and returns where the pool
// stands: the horizon, its cursor, its checkpoint and its lag. An unknown
// pool gives an error wrapping bustype.ErrUnknownPool.
func (c *Client) CheckpointGet(ctx context.Context, pool string) (checkpoint.Status, error) {
	if _, err := checkpoint.Advance(ctx, c.db, pool); err != nil {
		return checkpoint.Status{}, err
	}
	return checkpoint.Get(ctx, c.db, pool)
}

// CheckpointHolder returns the job that holds a pool's checkpoint, nil when
// the pool has no unfinished job. An unknown pool gives an error wrapping
// bustype.ErrUnknownPool.
func (c *Client) CheckpointHolder(ctx context.Context, pool string) (*checkpoint.Holder, error) {
	return checkpoint.GetHolder(ctx, c.db, pool)
}

// CheckpointWait blocks until every job of pool for an event at or below
// seq has finished (the pool's checkpoint reached seq), advancing the
// checkpoint every opts.PollInterval; opts may be nil. It returns ctx's
// error when ctx ends first, and an error wrapping bustype.ErrUnknownPool
// for an unknown pool. A pool whose filter skips the event at seq still
// reaches it: the checkpoint follows the cursor.
func (c *Client) CheckpointWait(ctx context.Context, pool string, seq int64, opts *checkpoint.WaitOpts) error {
	return checkpoint.WaitFor(ctx, c.db, pool, seq, opts)
}

// HorizonRepairResult is what HorizonRepair did.
type HorizonRepairResult struct {
	// Created: the row was missing and is now there, at Horizon.
	Created bool
	// Horizon is the horizon after the repair.
	Horizon int64
}

// HorizonRepair recreates a deleted horizon row (see
// bustype.ErrHorizonMissing). It needs the schema owner's privileges and is
// safe while riverbus runs.
func (c *Client) HorizonRepair(ctx context.Context) (HorizonRepairResult, error) {
	r, err := horizon.Repair(ctx, c.db)
	return HorizonRepairResult{Created: r.Created, Horizon: r.Horizon}, err
}

// RenumberedEvent is an event SequenceRepair moved from Old to New.
type RenumberedEvent struct {
	Old, New int64
}

// SequenceRepair gives every event numbered above the sequence's last value
// (the problem event_above_sequence: a number the assign trigger did not
// hand out, such as one inserted with the trigger disabled) the sequence's
// next number, lowest first, and returns what it moved, lowest first;
// nothing else of an event changes. The horizon never passes such an event,
// so each pool receives it once, at its new number, and the sequence goes
// on from where it was however high the planted number was. It is refused
// while the sequence is below the horizon (fix sequence_below_horizon
// first), needs the schema owner's privileges and is safe while riverbus
// runs.
func (c *Client) SequenceRepair(ctx context.Context) ([]RenumberedEvent, error) {
	moved, err := horizon.Renumber(ctx, c.db)
	if err != nil {
		return nil, err
	}
	out := make([]RenumberedEvent, len(moved))
	for i, m := range moved {
		out[i] = RenumberedEvent{Old: m.Old, New: m.New}
	}
	return out, nil
}

// Horizon returns the horizon: every event at or below it has committed or
// never will, and pools have read (or are about to read) up to it.
func (c *Client) Horizon(ctx context.Context) (int64, error) {
	h, err := horizon.Get(ctx, c.db)
	if err != nil {
		return 0, err
	}
	return h.Horizon, nil
}
