package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Job is a pool job as GetHolder reports it: a River job, or a dead letter
// kept in riverbus_dead_letter.
type Job struct {
	// ID is the River job id (a dead letter keeps the id of its job).
	ID int64
	// Sequence is the global sequence of the job's event.
	Sequence int64
	// State is River's state of the job; "discarded" for a dead letter.
	State string
	// DeadLetter is true for a dead letter: a job River discarded after its
	// last attempt, kept until `riverbus dlq retry` or `purge`.
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

// Holder is what holds a pool's checkpoint: the pool's unfinished job of the
// lowest sequence. The checkpoint cannot pass Sequence−1 until it finishes
// (completed, cancelled, or discarded as a dead letter).
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
	// in a pool created with --on-dead-letter block, its dead letter. Nil
	// when nothing blocks the lane (it is being handed on).
	LaneBlocker *Job
}

// HeldFor is how long the checkpoint has stood still: At − HeldSince, or 0.
func (h *Holder) HeldFor() time.Duration {
	return max(h.At.Sub(h.HeldSince), 0)
}

// GetHolder returns what holds the checkpoint of pool, or nil when the pool
// has no unfinished job. It reads the lowest unfinished sequence of the
// pool from the index Advance uses (one index probe), and for a pending job
// what blocks its lane. An unknown pool gives an error wrapping
// ErrUnknownPool.
//
// A job that turned unfinished below the stored checkpoint (a retried dead
// letter, a late event) is reported too: Advance keeps the checkpoint where
// it is until that job finishes.
func GetHolder(ctx context.Context, db DB, pool string) (*Holder, error) {
	var (
		h                    Holder
		id, seq              *int64
		state, lastErr       *string
		attempt, maxAttempt  *int
		scheduledAt, created *time.Time
		lane                 *string
	)
	err := db.QueryRow(ctx, sqlHolder, pool).Scan(&h.HeldSince, &h.At,
		&id, &seq, &state, &attempt, &maxAttempt, &scheduledAt, &created, &lastErr, &lane)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, unknownPool(ctx, db, pool)
	}
	if err != nil {
		return nil, fmt.Errorf("get checkpoint holder of pool %q: %w", pool, err)
	}
	if id == nil {
		return nil, nil
	}
	h.Job = Job{ID: *id, Sequence: *seq, State: *state, Attempt: *attempt, MaxAttempts: *maxAttempt,
		ScheduledAt: *scheduledAt, LastError: *lastErr, Lane: lane}
	if created.After(h.HeldSince) {
		h.HeldSince = *created
	}
	if h.State == "pending" && lane != nil {
		if h.LaneBlocker, err = laneBlocker(ctx, db, pool, *lane); err != nil {
			return nil, err
		}
	}
	return &h, nil
}

// laneBlocker returns what lane of pool waits for, or nil.
func laneBlocker(ctx context.Context, db DB, pool, lane string) (*Job, error) {
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
