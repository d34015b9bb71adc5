package riverbus

import (
	"context"
	"fmt"
	"slices"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/internal/engine"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/workers"
)

// PoolCreate creates a pool and reports whether it was created. A pool that
// exists with the same settings is returned as it is; with other settings
// the error wraps bustype.ErrPoolExists (use PoolUpdate). An invalid setting
// gives an error wrapping bustype.ErrInvalidPool that names it.
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
}

// PoolUpdate changes the settings of an existing pool; the settings params
// leaves zero keep their values. Its cursor and start point stay where they
// are; a change of filter, ordering or grouping applies from the cursor on.
func (c *Client) PoolUpdate(ctx context.Context, name string, params PoolUpdateParams) (*bustype.Pool, error) {
	p, err := pools.Get(ctx, c.db, name)
	if err != nil {
		return nil, err
	}
	merged := bustype.PoolParams{
		Name: name, Queue: p.Queue, EventTypes: p.EventTypes, Tags: p.Tags, MaxAttempts: p.MaxAttempts,
		Priority: p.Priority, Ordering: p.Ordering, OnDeadLetter: p.OnDeadLetter, Grouping: p.Grouping, Update: true,
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
// already created are left alone.
func (c *Client) PoolReset(ctx context.Context, name string, to int64) (*bustype.Pool, error) {
	return pools.Reset(ctx, c.db, name, to)
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

// DeadLetterList returns dead letters in job id order, a page at a time.
func (c *Client) DeadLetterList(ctx context.Context, params workers.DeadLetterListParams) ([]workers.DeadLetter, error) {
	return workers.ListDeadLetters(ctx, c.db, params)
}

// DeadLetterGet returns the dead letter of job jobID; an id that is not a
// dead letter gives an error wrapping bustype.ErrDeadLetterNotFound.
func (c *Client) DeadLetterGet(ctx context.Context, jobID int64) (*workers.DeadLetter, error) {
	dls, err := workers.ListDeadLetters(ctx, c.db, workers.DeadLetterListParams{AfterJobID: jobID - 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(dls) == 0 || dls[0].JobID != jobID {
		return nil, fmt.Errorf("dead letter %d: %w", jobID, bustype.ErrDeadLetterNotFound)
	}
	return &dls[0], nil
}

// DeadLetterRetry puts the dead letter of job jobID back to work (see
// workers.RetryDeadLetter for what that means for each kind of dead letter).
func (c *Client) DeadLetterRetry(ctx context.Context, jobID int64) (workers.DeadLetterRetry, error) {
	return workers.RetryDeadLetter(ctx, c.db, jobID)
}

// DeadLetterRetryPool retries every dead letter of pool, oldest first.
func (c *Client) DeadLetterRetryPool(ctx context.Context, pool string) ([]workers.DeadLetterRetry, error) {
	return workers.RetryDeadLetters(ctx, c.db, pool)
}

// DeadLetterPurge deletes the dead letter of job jobID and its job.
func (c *Client) DeadLetterPurge(ctx context.Context, jobID int64) error {
	return workers.PurgeDeadLetter(ctx, c.db, jobID)
}

// DeadLetterPurgePool deletes every dead letter of pool and returns how many.
func (c *Client) DeadLetterPurgePool(ctx context.Context, pool string) (int, error) {
	return workers.PurgeDeadLetters(ctx, c.db, pool)
}

// CheckpointGet returns where a pool stands: the horizon, its cursor, its
// checkpoint (advanced first) and its lag.
func (c *Client) CheckpointGet(ctx context.Context, pool string) (checkpoint.Status, error) {
	if _, err := checkpoint.Advance(ctx, c.db, pool); err != nil {
		return checkpoint.Status{}, err
	}
	return checkpoint.Get(ctx, c.db, pool)
}

// CheckpointHolder returns the job that holds a pool's checkpoint, nil when
// none does.
func (c *Client) CheckpointHolder(ctx context.Context, pool string) (*checkpoint.Holder, error) {
	return checkpoint.GetHolder(ctx, c.db, pool)
}

// CheckpointWait blocks until every job of pool for an event at or below seq
// has finished, or ctx ends.
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
	r, err := engine.RepairHorizon(ctx, c.db)
	return HorizonRepairResult{Created: r.Created, Horizon: r.Horizon}, err
}
