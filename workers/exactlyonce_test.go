package workers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// ledgerArgs are the args of pool "ledger".
type ledgerArgs struct{ workers.Args }

func (ledgerArgs) Kind() string { return "ledger" }

// setupProjection creates pool "ledger" and a projection counting how often
// each event was applied.
func setupProjection(t *testing.T, maxAttempts int) *pgxpool.Pool {
	t.Helper()
	db := pgtest.NewPool(t)
	jobtest.CreatePool(t, db, "ledger", "ledger", maxAttempts)
	_, err := db.Exec(context.Background(), `CREATE TABLE applied (global_sequence bigint PRIMARY KEY, times int NOT NULL)`)
	require.NoError(t, err)
	return db
}

func apply(ctx context.Context, tx pgx.Tx, seq int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO applied VALUES ($1, 1)
		ON CONFLICT (global_sequence) DO UPDATE SET times = applied.times + 1`, seq)
	return err
}

func appliedTimes(t *testing.T, db *pgxpool.Pool, seq int64) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(), `SELECT times FROM applied WHERE global_sequence = $1`, seq).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return n
}

func TestRunExactlyOnce(t *testing.T) {
	t.Parallel()

	// The worker commits the projection and the completion, then "crashes":
	// Work returns an error as a process dying before River records the
	// outcome would leave it. River must not run the job again.
	t.Run("CrashAfterCommit", func(t *testing.T) {
		t.Parallel()
		db := setupProjection(t, 5)
		var runs atomic.Int32
		ws := river.NewWorkers()
		river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, job *river.Job[ledgerArgs]) error {
			runs.Add(1)
			if err := workers.RunExactlyOnce(ctx, db, job, func(ctx context.Context, tx pgx.Tx) error {
				return apply(ctx, tx, job.Args.GlobalSequence)
			}); err != nil {
				return err
			}
			return errors.New("crashed after commit")
		}))
		client := jobtest.StartClient(t, db, ws, map[string]int{"ledger": 2}, nil)
		ids := jobtest.InsertEvents(t, db, "ledger", jobtest.Event(1, "entry.posted", `{}`))

		jobtest.WaitJobState(t, db, ids[0], "completed")
		jobtest.StopClient(t, client) // waits for River to record the Work error
		j, _ := jobtest.GetJob(t, db, ids[0])
		require.Equal(t, jobtest.Job{State: "completed", Attempt: 1, MaxAttempts: 5, Errors: 0}, j)
		require.Equal(t, 1, appliedTimes(t, db, 1))
		require.Equal(t, int32(1), runs.Load())
	})

	// The same job delivered twice to the handler (as after a crash between
	// commit and River's bookkeeping): the second run is a no-op.
	t.Run("SameJobTwice", func(t *testing.T) {
		t.Parallel()
		db := setupProjection(t, 5)
		var fnCalls atomic.Int32
		secondErr := make(chan error, 1)
		ws := river.NewWorkers()
		river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, job *river.Job[ledgerArgs]) error {
			fn := func(ctx context.Context, tx pgx.Tx) error {
				fnCalls.Add(1)
				return apply(ctx, tx, job.Args.GlobalSequence)
			}
			if err := workers.RunExactlyOnce(ctx, db, job, fn); err != nil {
				return err
			}
			secondErr <- workers.RunExactlyOnce(ctx, db, job, fn)
			return nil
		}))
		jobtest.StartClient(t, db, ws, map[string]int{"ledger": 2}, nil)
		ids := jobtest.InsertEvents(t, db, "ledger", jobtest.Event(1, "entry.posted", `{}`))

		select {
		case err := <-secondErr:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("timed out waiting for the worker")
		}
		j := jobtest.WaitJobState(t, db, ids[0], "completed")
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, 1, appliedTimes(t, db, 1))
		require.Equal(t, int32(1), fnCalls.Load())
	})

	// fn fails on the first attempt after writing: nothing of it stays, the
	// job is retried and applied once.
	t.Run("FailureRollsBack", func(t *testing.T) {
		t.Parallel()
		db := setupProjection(t, 5)
		ws := river.NewWorkers()
		river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, job *river.Job[ledgerArgs]) error {
			return workers.RunExactlyOnce(ctx, db, job, func(ctx context.Context, tx pgx.Tx) error {
				if err := apply(ctx, tx, job.Args.GlobalSequence); err != nil {
					return err
				}
				if job.Attempt == 1 {
					return errors.New("downstream hiccup")
				}
				return nil
			})
		}))
		jobtest.StartClient(t, db, ws, map[string]int{"ledger": 2}, nil)
		ids := jobtest.InsertEvents(t, db, "ledger", jobtest.Event(1, "entry.posted", `{}`))

		j := jobtest.WaitJobState(t, db, ids[0], "completed")
		require.Equal(t, jobtest.Job{State: "completed", Attempt: 2, MaxAttempts: 5, Errors: 1}, j)
		require.Equal(t, 1, appliedTimes(t, db, 1))
	})

	// A worker holding a stale attempt (the job was rescued and is now
	// another worker's) must not apply anything.
	t.Run("StaleAttempt", func(t *testing.T) {
		t.Parallel()
		db := setupProjection(t, 5)
		staleErr := make(chan error, 1)
		var fnCalls atomic.Int32
		ws := river.NewWorkers()
		river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, job *river.Job[ledgerArgs]) error {
			stale := *job
			stale.Attempt = job.Attempt - 1
			staleErr <- workers.RunExactlyOnce(ctx, db, &stale, func(context.Context, pgx.Tx) error {
				fnCalls.Add(1)
				return nil
			})
			return nil
		}))
		jobtest.StartClient(t, db, ws, map[string]int{"ledger": 2}, nil)
		ids := jobtest.InsertEvents(t, db, "ledger", jobtest.Event(1, "entry.posted", `{}`))

		select {
		case err := <-staleErr:
			require.ErrorIs(t, err, workers.ErrJobNotRunning)
			require.EqualError(t, err, fmt.Sprintf("job is not running this attempt: job %d is running at attempt 1, this worker has attempt 0", ids[0]))
		case <-time.After(20 * time.Second):
			t.Fatal("timed out waiting for the worker")
		}
		require.Equal(t, int32(0), fnCalls.Load())
		jobtest.WaitJobState(t, db, ids[0], "completed")
	})
}

// ledgerWorker applies each event once with RunExactlyOnce on db: the pool
// in production, the test's transaction under rivertest.Worker.
type ledgerWorker struct {
	river.WorkerDefaults[ledgerArgs]
	db workers.DB
}

func (w *ledgerWorker) Work(ctx context.Context, job *river.Job[ledgerArgs]) error {
	return workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		return apply(ctx, tx, job.Args.GlobalSequence)
	})
}

// River's rivertest.Worker inserts and works the job inside the test's
// transaction. A RunExactlyOnce handler given that transaction as its
// workers.DB works there too (its write and the completion in a savepoint
// of it); given the pool, it cannot see the uncommitted job and says so.
func TestRunExactlyOnceUnderRiverTestWorker(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := setupProjection(t, 3)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	args := ledgerArgs{workers.Args{Event: outbox.Event{GlobalSequence: 7, Type: "invoice.paid", Data: json.RawMessage(`{}`)}}}

	res, err := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, &ledgerWorker{db: tx}).Work(ctx, t, tx, args, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	var times int
	require.NoError(t, tx.QueryRow(ctx, `SELECT times FROM applied WHERE global_sequence = 7`).Scan(&times))
	require.Equal(t, 1, times)

	_, err = rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, &ledgerWorker{db: db}).Work(ctx, t, tx, args, nil)
	require.ErrorIs(t, err, workers.ErrJobNotRunning, "the pool cannot see the test transaction's job")
}
