package riverbus

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/pools"
)

// PoolReplay is what a reset of a pool starts: the pool delivers the events
// in (After, Through] again, each as a new job. PoolReplayStart returns it;
// PoolReplayWait waits for it.
type PoolReplay struct {
	// Pool is the pool as the reset left it.
	Pool *bustype.Pool
	// After is the reset point: the replay starts with the event after it.
	After int64
	// Through is the horizon when the reset ran: the last event the
	// replay delivers again. Events above it are new ones.
	Through int64
	// JobsAfter is the highest River job id when the reset ran. Every job
	// of the replay has a higher id: a dead letter of the same event from
	// before the reset is not the replay's.
	JobsAfter int64
	// MarkAt, for a reset to a time (PoolReplayStartToTime), is when the
	// horizon recorded After as committed (PoolRewind.MarkAt); zero for a
	// reset to a sequence.
	MarkAt time.Time
}

// PoolReplayWaitPollIntervalDefault is the default of
// PoolReplayWaitOpts.PollInterval.
const PoolReplayWaitPollIntervalDefault = 200 * time.Millisecond

// PoolReplayDeadLettersListed is how many of a replay's dead letters a
// PoolReplayResult lists (it counts them all).
const PoolReplayDeadLettersListed = 10

// PoolReplayWaitOpts are the optional settings of PoolReplayWait; nil means
// the defaults.
type PoolReplayWaitOpts struct {
	// PollInterval is how often the wait advances the pool's checkpoint
	// and counts the replay's dead letters. Zero:
	// PoolReplayWaitPollIntervalDefault; negative is an error.
	PollInterval time.Duration
	// ProgressFunc, when set, is called after every poll with where the
	// replay stands (to draw a progress bar), the last poll included.
	ProgressFunc func(PoolReplayResult)
}

// PoolReplayResult is where a replay stands.
type PoolReplayResult struct {
	Pool       string
	After      int64
	Through    int64
	Checkpoint int64
	// DeadLetterCount counts the replay's dead letters: jobs of the
	// replay River discarded after their last attempt, still dead letters.
	// DeadLetters are the first PoolReplayDeadLettersListed of them, by
	// sequence.
	DeadLetterCount int64
	DeadLetters     []bustype.DeadLetter
}

// Done reports whether every event of the replay is finished: its job
// completed, or a dead letter.
func (r *PoolReplayResult) Done() bool { return r.Checkpoint >= r.Through }

// PoolReplayStart resets a pool as PoolReset does and returns the replay
// the reset starts, for PoolReplayWait.
func (c *Client) PoolReplayStart(ctx context.Context, name string, to int64) (*PoolReplay, error) {
	r, err := pools.ResetReplay(ctx, c.db, name, to)
	if err != nil {
		return nil, err
	}
	return newPoolReplay(r), nil
}

// PoolReplayStartToTime resets a pool to a time as PoolResetToTime does
// and returns the replay the reset starts, for PoolReplayWait.
func (c *Client) PoolReplayStartToTime(ctx context.Context, name string, t time.Time) (*PoolReplay, error) {
	r, err := pools.ResetReplayToTime(ctx, c.db, name, t)
	if err != nil {
		return nil, err
	}
	return newPoolReplay(r), nil
}

func newPoolReplay(r *pools.Replay) *PoolReplay {
	return &PoolReplay{Pool: r.Pool, After: r.After, Through: r.Through, JobsAfter: r.JobsAfter, MarkAt: r.MarkAt}
}

// PoolReplayWait blocks until every event of replay is finished (the pool's
// checkpoint reached replay.Through), advancing the checkpoint as it polls,
// and returns where the replay ended with the dead letters it made. A
// replay that made dead letters (a handler that refuses an event it has
// already applied, say: workers.RunExactlyOnce guards one job, and a replay
// makes a new job for each event) returns its result and an error wrapping
// bustype.ErrReplayDeadLetters that counts them. When ctx ends first it
// returns the result of its last poll (nil before the first) and ctx's
// error. Some Client must run the fan-out and workers must work the pool's
// jobs for the replay to move; a pool whose dead letters block their keys
// (bustype.DeadLetterBlock) does not finish until they are retried or
// purged.
func (c *Client) PoolReplayWait(ctx context.Context, replay *PoolReplay, opts *PoolReplayWaitOpts) (*PoolReplayResult, error) {
	if opts == nil {
		opts = &PoolReplayWaitOpts{}
	}
	if opts.PollInterval < 0 {
		return nil, fmt.Errorf("PollInterval must not be negative, got %s", opts.PollInterval)
	}
	interval := cmp.Or(opts.PollInterval, PoolReplayWaitPollIntervalDefault)
	name := replay.Pool.Name
	var last *PoolReplayResult
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-timer.C:
		}
		r := &PoolReplayResult{Pool: name, After: replay.After, Through: replay.Through}
		var err error
		if r.Checkpoint, err = checkpoint.Advance(ctx, c.db, name); err == nil {
			r.DeadLetterCount, r.DeadLetters, err = deadletters.OfReplay(ctx, c.db, name, replay.JobsAfter,
				replay.After, replay.Through, PoolReplayDeadLettersListed)
		}
		if err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			return last, fmt.Errorf("wait for the replay of pool %q: %w", name, err)
		}
		last = r
		if opts.ProgressFunc != nil {
			opts.ProgressFunc(*r)
		}
		if r.Done() {
			if r.DeadLetterCount > 0 {
				return r, fmt.Errorf("replay of pool %q (events after %d through %d): %d %w",
					name, r.After, r.Through, r.DeadLetterCount, bustype.ErrReplayDeadLetters)
			}
			return r, nil
		}
		timer.Reset(interval)
	}
}
