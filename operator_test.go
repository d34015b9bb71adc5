package riverbus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// operatorSetup gives a Client that is not started, over a database with
// pool "billing" (one attempt per job).
func operatorSetup(t *testing.T) (context.Context, *testBundle, *riverbus.Client) {
	t.Helper()
	ctx, b := setup(t)
	client, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "billing", MaxAttempts: 1})
	require.NoError(t, err)
	return ctx, b, client
}

// insertJob inserts a job of pool billing for event seq in state, as River
// leaves it; a discarded one becomes a dead letter by the trigger.
func insertJob(t *testing.T, db *pgxpool.Pool, seq int64, state rivertype.JobState) int64 {
	t.Helper()
	args, err := json.Marshal(workers.Args{Event: outbox.Event{GlobalSequence: seq, Type: "invoice.paid", Data: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, attempt, finalized_at, errors)
		VALUES ($1, 'billing', 1, 1, 'billing', $2::river_job_state, 1, CASE WHEN $2 IN ('cancelled', 'completed', 'discarded') THEN now() END,
			ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'card declined', 'trace', '')])
		RETURNING id`, args, string(state)).Scan(&id))
	return id
}

func jobState(t *testing.T, db *pgxpool.Pool, id int64) rivertype.JobState {
	t.Helper()
	var state rivertype.JobState
	require.NoError(t, db.QueryRow(context.Background(), `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	return state
}

func TestClientDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, b, client := operatorSetup(t)
	first := insertJob(t, b.db, 1, rivertype.JobStateDiscarded)
	second := insertJob(t, b.db, 2, rivertype.JobStateDiscarded)

	dls, err := client.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "billing"})
	require.NoError(t, err)
	require.Len(t, dls, 2)
	require.Equal(t, []int64{first, second}, []int64{dls[0].JobID, dls[1].JobID})
	_, err = client.DeadLetterList(ctx, bustype.DeadLetterListParams{Limit: -1})
	require.EqualError(t, err, "Limit must be between 1 and 10000, got -1")

	dl, err := client.DeadLetterGet(ctx, first)
	require.NoError(t, err)
	require.Equal(t, int64(1), dl.GlobalSequence)
	require.Equal(t, "card declined", dl.LastError)
	require.True(t, dl.JobExists)
	require.Equal(t, bustype.JobStateDiscarded, dl.JobState)
	_, err = client.DeadLetterGet(ctx, second+1)
	require.ErrorIs(t, err, bustype.ErrDeadLetterNotFound)

	res, err := client.DeadLetterRetry(ctx, first)
	require.NoError(t, err)
	require.Equal(t, bustype.DeadLetterRetryResult{DeadJobID: first, JobID: first, Action: bustype.RetryRequeued}, res)
	require.Equal(t, rivertype.JobStateAvailable, jobState(t, b.db, first))
	_, err = client.DeadLetterGet(ctx, first)
	require.ErrorIs(t, err, bustype.ErrDeadLetterNotFound, "retried: no longer a dead letter")
	_, err = client.DeadLetterRetry(ctx, first)
	require.ErrorIs(t, err, bustype.ErrDeadLetterNotFound)

	require.NoError(t, client.DeadLetterPurge(ctx, second))
	require.ErrorIs(t, client.DeadLetterPurge(ctx, second), bustype.ErrDeadLetterNotFound)

	// A pool's dead letters, in sequence order.
	fourth := insertJob(t, b.db, 4, rivertype.JobStateDiscarded)
	third := insertJob(t, b.db, 3, rivertype.JobStateDiscarded)
	all, err := client.DeadLetterRetryPool(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, []bustype.DeadLetterRetryResult{
		{DeadJobID: third, JobID: third, Action: bustype.RetryRequeued},
		{DeadJobID: fourth, JobID: fourth, Action: bustype.RetryRequeued},
	}, all)

	insertJob(t, b.db, 5, rivertype.JobStateDiscarded)
	insertJob(t, b.db, 6, rivertype.JobStateDiscarded)
	n, err := client.DeadLetterPurgePool(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	dls, err = client.DeadLetterList(ctx, bustype.DeadLetterListParams{})
	require.NoError(t, err)
	require.Empty(t, dls)
}

func TestClientCheckpoints(t *testing.T) {
	t.Parallel()
	ctx, b, client := operatorSetup(t)

	_, err := client.CheckpointGet(ctx, "nope")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.EqualError(t, err, `unknown pool "nope": pools are billing`)
	_, err = client.CheckpointHolder(ctx, "nope")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.ErrorIs(t, client.CheckpointWait(ctx, "nope", 1, nil), bustype.ErrUnknownPool)
	require.EqualError(t, client.CheckpointWait(ctx, "billing", 1, &checkpoint.WaitOpts{PollInterval: -time.Second}),
		"PollInterval must not be negative, got -1s")

	h, err := client.CheckpointHolder(ctx, "billing")
	require.NoError(t, err)
	require.Nil(t, h, "no job, nothing holds")

	// Events 1 and 2 fanned out: 1 still retrying, 2 done.
	_, err = b.db.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 2; UPDATE riverbus_pool SET cursor_seq = 2 WHERE name = 'billing'`)
	require.NoError(t, err)
	held := insertJob(t, b.db, 1, rivertype.JobStateRetryable)
	insertJob(t, b.db, 2, rivertype.JobStateCompleted)

	cp, err := client.CheckpointGet(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, checkpoint.Status{Pool: "billing", Horizon: 2, Cursor: 2, Checkpoint: 0, Lag: 2}, cp)
	h, err = client.CheckpointHolder(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, held, h.ID)
	require.Equal(t, int64(1), h.Sequence)
	require.Equal(t, bustype.JobStateRetryable, h.State)
	require.Equal(t, "card declined", h.LastError)

	// The wait ends with its context while event 1 is unfinished, and as
	// soon as it finishes otherwise.
	waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, client.CheckpointWait(waitCtx, "billing", 2, nil), context.DeadlineExceeded)
	_, err = b.db.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, held)
	require.NoError(t, err)
	waitCtx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, client.CheckpointWait(waitCtx, "billing", 2, &checkpoint.WaitOpts{PollInterval: time.Millisecond}))
	cp, err = client.CheckpointGet(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, checkpoint.Status{Pool: "billing", Horizon: 2, Cursor: 2, Checkpoint: 2, Lag: 0}, cp)
}
