package riverbus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

type laneWaitArgs struct{ workers.Args }

func (laneWaitArgs) Kind() string { return "lanewait" }

// laneWaitWorker applies its events with RunExactlyOnce once gate opens.
type laneWaitWorker struct {
	river.WorkerDefaults[laneWaitArgs]
	db   workers.DB
	gate chan struct{}
}

func (w *laneWaitWorker) Work(ctx context.Context, job *river.Job[laneWaitArgs]) error {
	<-w.gate
	return workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO applied (global_sequence) VALUES ($1)`, job.Args.GlobalSequence)
		return err
	})
}

// In a key-ordered pool, a RunExactlyOnce handler's completion releases
// its lane, which waits for the lane locks a fan-out batch of the pool
// holds, for seconds when the batch carries big events. The release gives
// up after its own lock_timeout (5 s); RunExactlyOnce then tries the
// completion again, so the attempt is not spent on the wait: here the
// pool's lane rows are held for 7 s, and the job completes at its first
// attempt, its event applied once. Before, the attempt failed with "lock
// timeout", its work rolled back, and the job was retried.
func TestRunExactlyOnceWaitsOutALongFanoutBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	_, err := db.Exec(ctx, `CREATE TABLE applied (global_sequence bigint PRIMARY KEY)`)
	require.NoError(t, err)
	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "lanewait", Ordering: bustype.OrderingKey, MaxAttempts: 3})
	w := &laneWaitWorker{db: db, gate: make(chan struct{})}
	ws := workers.NewRegistry()
	workers.Add(ws, w, nil)
	client := riverbustest.StartClient(t, db, &riverbus.Config{Workers: ws})
	appended, err := outbox.Append(ctx, db, outbox.Event{Type: "t", Key: "k", Data: json.RawMessage(`{}`)},
		outbox.Event{Type: "t", Key: "k", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'lanewait' AND state = 'running'`).Scan(&n))
		return n == 1
	}, 30*time.Second, 20*time.Millisecond, "the key's first job runs")

	// What a long fan-out batch of the pool does: hold its lane rows.
	batch, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = batch.Exec(ctx, `SELECT 1 FROM riverbus_lane_lock WHERE pool = 'lanewait' FOR UPDATE`)
	require.NoError(t, err)
	close(w.gate)
	time.Sleep(7 * time.Second)
	require.NoError(t, batch.Rollback(ctx))
	riverbustest.WaitForSequence(t, client, "lanewait", appended[1].GlobalSequence, 30*time.Second)

	var attempts []int
	var errs []string
	require.NoError(t, db.QueryRow(ctx, `SELECT array_agg(attempt ORDER BY id), array_agg(coalesce(errors::text, '') ORDER BY id)
		FROM river_job WHERE kind = 'lanewait'`).Scan(&attempts, &errs))
	require.Equal(t, []int{1, 1}, attempts, "each job completed at its first attempt; errors: %v", errs)
	var applied int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&applied))
	require.Equal(t, 2, applied)
}
