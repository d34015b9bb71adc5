package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pools"
)

// GetHolder returns what holds the checkpoint of pool, or nil when the pool
// has no unfinished job. It reads the lowest unfinished sequence of the
// pool from the index Advance uses (one index probe), and for a pending job
// what blocks its lane. An unknown pool gives an error wrapping
// bustype.ErrUnknownPool.
//
// A job that turned unfinished below the stored checkpoint (a retried dead
// letter, a late event) is reported too: Advance keeps the checkpoint where
// it is until that job finishes.
func GetHolder(ctx context.Context, db database.DB, pool string) (*Holder, error) {
	var (
		h                    Holder
		id, seq              *int64
		state                *rivertype.JobState
		lastErr              *string
		attempt, maxAttempt  *int
		scheduledAt, created *time.Time
		lane                 *string
	)
	err := db.QueryRow(ctx, sqlHolder, pool).Scan(&h.HeldSince, &h.At,
		&id, &seq, &state, &attempt, &maxAttempt, &scheduledAt, &created, &lastErr, &lane)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, pools.UnknownError(ctx, db, pool)
	}
	if err != nil {
		return nil, fmt.Errorf("get checkpoint holder of pool %q: %w", pool, err)
	}
	if id == nil {
		return nil, nil
	}
	h.Job = Job{ID: *id, Sequence: *seq, State: bustype.JobState(*state), Attempt: *attempt, MaxAttempts: *maxAttempt,
		ScheduledAt: *scheduledAt, LastError: *lastErr, Lane: lane}
	if created.After(h.HeldSince) {
		h.HeldSince = *created
	}
	if h.State == bustype.JobStatePending && lane != nil {
		if h.LaneBlocker, err = laneBlocker(ctx, db, pool, *lane); err != nil {
			return nil, err
		}
	}
	return &h, nil
}

// laneBlocker returns what lane of pool waits for, or nil.
func laneBlocker(ctx context.Context, db database.DB, pool, lane string) (*Job, error) {
	var (
		b                      Job
		seq                    *int64
		scheduled, discardedAt *time.Time
	)
	err := db.QueryRow(ctx, sqlLaneBlocker, pool, lane).Scan(&b.ID, &seq, &b.State, &b.Attempt, &b.MaxAttempts,
		&scheduled, &discardedAt, &b.LastError, &b.DeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get what blocks lane %q of pool %q: %w", lane, pool, err)
	}
	if seq != nil {
		b.Sequence = *seq
	}
	if scheduled != nil {
		b.ScheduledAt = *scheduled
	}
	if discardedAt != nil {
		b.DiscardedAt = *discardedAt
	}
	b.Lane = &lane
	return &b, nil
}
