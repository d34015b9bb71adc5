package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
)

// failJob records a failed attempt of job id the way River does: attempt
// and errors grow, and the job waits for its next attempt.
func failJob(t *testing.T, db *pgxpool.Pool, id int64, state, msg string, next time.Duration) {
	t.Helper()
	_, err := db.Exec(context.Background(), `UPDATE river_job SET state = $2::river_job_state, attempt = attempt + 1,
		attempted_at = now(), scheduled_at = now() + $4::interval,
		finalized_at = CASE WHEN $2 = 'discarded' THEN now() END,
		errors = coalesce(errors, '{}') || jsonb_build_object('at', now(), 'attempt', attempt + 1, 'error', $3::text, 'trace', '')
		WHERE id = $1`, id, state, msg, next.String())
	require.NoError(t, err)
}

func TestGetHolder(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	createPool(t, bundle.db, "orders", "orders", 9)

	_, err := checkpoint.GetHolder(ctx, bundle.db, "nope")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	h, err := checkpoint.GetHolder(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Nil(t, h, "no unfinished job, nothing holds")

	ids := insertJobs(t, bundle.db, "orders", "orders", 5, 7, 9)
	failJob(t, bundle.db, ids[0], "retryable", "charge failed: card declined", time.Hour)
	failJob(t, bundle.db, ids[0], "retryable", "charge failed: \x1b[31mred\x1b[0m", time.Hour)
	_, err = checkpoint.Advance(ctx, bundle.db, "orders")
	require.NoError(t, err)

	h, err = checkpoint.GetHolder(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.NotNil(t, h)
	require.Equal(t, ids[0], h.ID)
	require.Equal(t, int64(5), h.Sequence)
	require.Equal(t, bustype.JobStateRetryable, h.State)
	require.Equal(t, 2, h.Attempt)
	require.Equal(t, 3, h.MaxAttempts)
	require.Equal(t, "charge failed: \x1b[31mred\x1b[0m", h.LastError, "the last attempt's error, as the handler wrote it")
	require.WithinDuration(t, h.At.Add(time.Hour), h.ScheduledAt, time.Minute, "the next attempt")
	require.Nil(t, h.Lane)
	require.Nil(t, h.LaneBlocker)
	require.False(t, h.HeldSince.After(h.At))
	require.Equal(t, h.At.Sub(h.HeldSince), h.HeldFor(), "held since the job's event became the lowest unfinished one")

	// The holder finishes: the next one holds, with no error yet.
	finish(t, bundle.db, "completed", ids[0])
	h, err = checkpoint.GetHolder(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, ids[1], h.ID)
	require.Equal(t, int64(7), h.Sequence)
	require.Equal(t, bustype.JobStateAvailable, h.State)
	require.Empty(t, h.LastError)
}

// In a key-ordered pool that blocks on dead letters, the checkpoint is held
// by the lane's next pending job, and what holds that job is the lane's
// dead letter; in flight, by the lane's retrying job.
func TestGetHolderLaneBlocker(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, err := bundle.db.Exec(ctx, `INSERT INTO riverbus_pool (name, queue, start_after, cursor_seq, ordering, on_dead_letter)
		VALUES ('ledger', 'ledger', 0, 4, 'key', 'block')`)
	require.NoError(t, err)
	insert := func(seq int64, lane, state string) int64 {
		var id int64
		require.NoError(t, bundle.db.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, metadata)
			VALUES (jsonb_build_object('global_sequence', $1::bigint), 'ledger', 2, 'ledger', $3::river_job_state,
			        jsonb_build_object('riverbus_lane', $2::text))
			RETURNING id`, seq, lane, state).Scan(&id))
		return id
	}
	dead := insert(1, "k1", "running")
	pending := insert(2, "k1", "pending")
	insert(3, "k2", "pending")
	insert(4, "k2", "pending")

	// The lane's job in flight, retrying.
	failJob(t, bundle.db, dead, "retryable", "ledger timed out", time.Minute)
	h, err := checkpoint.GetHolder(ctx, bundle.db, "ledger")
	require.NoError(t, err)
	require.Equal(t, dead, h.ID)
	require.Equal(t, "k1", *h.Lane)
	require.Nil(t, h.LaneBlocker)

	// Its last attempt fails: a dead letter that keeps the lane.
	_, err = bundle.db.Exec(ctx, `UPDATE river_job SET state = 'running' WHERE id = $1`, dead)
	require.NoError(t, err)
	failJob(t, bundle.db, dead, "discarded", "ledger rejected the entry", 0)
	h, err = checkpoint.GetHolder(ctx, bundle.db, "ledger")
	require.NoError(t, err)
	require.Equal(t, pending, h.ID)
	require.Equal(t, int64(2), h.Sequence)
	require.Equal(t, bustype.JobStatePending, h.State)
	require.NotNil(t, h.LaneBlocker)
	b := h.LaneBlocker
	require.True(t, b.DeadLetter)
	require.Equal(t, dead, b.ID)
	require.Equal(t, int64(1), b.Sequence)
	require.Equal(t, 2, b.Attempt)
	require.Equal(t, 2, b.MaxAttempts)
	require.Equal(t, "ledger rejected the entry", b.LastError)
	require.False(t, b.DiscardedAt.IsZero())

	// Purged, the dead letter no longer blocks: nothing does.
	_, err = bundle.db.Exec(ctx, `DELETE FROM riverbus_dead_letter WHERE job_id = $1`, dead)
	require.NoError(t, err)
	h, err = checkpoint.GetHolder(ctx, bundle.db, "ledger")
	require.NoError(t, err)
	require.Equal(t, pending, h.ID)
	require.Nil(t, h.LaneBlocker)
}
