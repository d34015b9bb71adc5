package workers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/workers"
)

// paymentArgs are the args of pool "payments".
type paymentArgs struct{ workers.Args }

func (paymentArgs) Kind() string { return "payments" }

// insertStuck inserts a job of pool that has been running for ten minutes
// (its worker died), at attempt of maxAttempts.
func insertStuck(t *testing.T, db *pgxpool.Pool, pool string, seq int64, attempt, maxAttempts int) int64 {
	t.Helper()
	args, err := json.Marshal(workers.Args{Event: jobtest.Event(seq, "ledger.posted", `{}`)})
	require.NoError(t, err)
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, attempt, attempted_at, attempted_by)
		VALUES ($1, $2, $3, 1, $2, 'running', $4, now() - interval '10 minutes', '{dead-worker}') RETURNING id`,
		args, pool, maxAttempts, attempt).Scan(&id))
	return id
}

// River's rescuer, in whichever client leads, discards a stuck job whose
// kind that client has no worker for. A riverbus process works only some
// pools, so without riverbus_rescue_retry a job of another pool would die
// the first time its worker was killed. It must be retried instead, while
// a stuck job on its last attempt still becomes a dead letter.
func TestRescuerRetriesStuckJobsOfPoolsThisClientDoesNotWork(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	jobtest.CreatePool(t, db, "payments", "payments", 5)
	jobtest.CreatePool(t, db, "ledger", "ledger", 5)
	withAttemptsLeft := insertStuck(t, db, "ledger", 1, 1, 5)
	lastAttempt := insertStuck(t, db, "ledger", 2, 5, 5)
	// The retry follows the pool's schedule (migration 014), not River's
	// default (1s after a first failure).
	_, err := db.Exec(context.Background(), `UPDATE riverbus_pool SET retry_base = '10 minutes', retry_max_delay = '1 hour', retry_jitter = 0 WHERE name = 'ledger'`)
	require.NoError(t, err)

	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(context.Context, *river.Job[paymentArgs]) error { return nil }))
	jobtest.StartClient(t, db, ws, map[string]int{"payments": 1}, &workers.RiverOpts{Config: workers.Config{JobTimeout: time.Second, RescueStuckJobsAfter: 2 * time.Second}})

	retried := jobtest.WaitJobState(t, db, withAttemptsLeft, "retryable")
	require.Equal(t, 1, retried.Attempt)
	require.Equal(t, 1, retried.Errors, "the rescuer's error is kept")
	var delay time.Duration
	require.NoError(t, db.QueryRow(context.Background(), `SELECT scheduled_at - (errors[1]->>'at')::timestamptz FROM river_job WHERE id = $1`, withAttemptsLeft).Scan(&delay))
	require.InDelta(t, (10 * time.Minute).Seconds(), delay.Seconds(), 30, "the pool's 10 minutes, got %s", delay)
	jobtest.WaitJobState(t, db, lastAttempt, "discarded")
	client, err := riverbus.NewClient(db, nil)
	require.NoError(t, err)
	dls, err := client.DeadLetterList(context.Background(), bustype.DeadLetterListParams{Pool: "ledger"})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, lastAttempt, dls[0].JobID)
	require.Equal(t, "Stuck job rescued by JobRescuer", dls[0].LastError)
}
