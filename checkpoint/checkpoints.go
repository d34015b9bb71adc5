package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pools"
)

// Advance computes the checkpoint of pool, stores it if it moved forward, and
// returns it. It runs one statement; see the package documentation for the
// formula and why one snapshot matters. It returns the stored checkpoint
// (or, when a concurrent Advance stored a higher one at the same moment, a
// value no higher than that one and no lower than this call's result). An
// unknown pool gives an error wrapping bustype.ErrUnknownPool.
//
// Advance writes, and so locks the pool row, only when the checkpoint moves;
// then it waits for a fan-out batch of the pool that is in flight, and a
// fan-out that tries to lock the row meanwhile skips the pool for that
// round.
func Advance(ctx context.Context, db database.DB, pool string) (int64, error) {
	var seq int64
	err := db.QueryRow(ctx, sqlAdvance, pool).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, pools.UnknownError(ctx, db, pool)
	}
	if err != nil {
		return 0, fmt.Errorf("advance checkpoint of pool %q: %w", pool, err)
	}
	return seq, nil
}

// AdvanceAll advances the checkpoint of every pool, in one statement
// whatever the number of pools, and returns the checkpoints by pool name.
func AdvanceAll(ctx context.Context, db database.DB) (map[string]int64, error) {
	rows, err := db.Query(ctx, sqlAdvanceAll)
	if err != nil {
		return nil, fmt.Errorf("advance checkpoints: %w", err)
	}
	out := map[string]int64{}
	var (
		name string
		seq  int64
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &seq}, func() error {
		out[name] = seq
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("advance checkpoints: %w", err)
	}
	return out, nil
}

// Get returns the stored horizon, cursor and checkpoint of pool and its lag.
// It does not advance the checkpoint; call Advance first for a fresh one. An
// unknown pool gives an error wrapping bustype.ErrUnknownPool.
func Get(ctx context.Context, db database.DB, pool string) (Status, error) {
	st := Status{Pool: pool}
	err := db.QueryRow(ctx, sqlStatus, pool).Scan(&st.Horizon, &st.Cursor, &st.Checkpoint)
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{}, pools.UnknownError(ctx, db, pool)
	}
	if err != nil {
		return Status{}, fmt.Errorf("get checkpoint of pool %q: %w", pool, err)
	}
	st.Lag = max(st.Horizon-st.Checkpoint, 0)
	return st, nil
}

// WaitFor returns nil once the checkpoint of pool is at least seq, that is
// once every job of the pool for an event ≤ seq is finished. It advances the
// checkpoint every opts.PollInterval while it waits; opts may be nil. It
// returns the context's error when ctx ends first, and an error wrapping
// bustype.ErrUnknownPool for an unknown pool. A negative PollInterval gives
// an error that names it.
//
// A pool whose filter skips the event at seq still reaches seq: the
// checkpoint follows the cursor. db must not be a transaction at REPEATABLE
// READ or SERIALIZABLE, whose snapshot would never see the jobs finish.
func WaitFor(ctx context.Context, db database.DB, pool string, seq int64, opts *WaitOpts) error {
	if opts == nil {
		opts = &WaitOpts{}
	}
	if opts.PollInterval < 0 {
		return fmt.Errorf("PollInterval must not be negative, got %s", opts.PollInterval)
	}
	interval := cmp.Or(opts.PollInterval, WaitPollIntervalDefault)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		got, err := Advance(ctx, db, pool)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if got >= seq {
			return nil
		}
		timer.Reset(interval)
	}
}
