package lanes_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is what a lanes test works with.
type testBundle struct {
	db *pgxpool.Pool // a database of its own with the key-ordered pool "ord"
}

// setup gives the test a fresh database holding pool "ord", the pool whose
// jobs insertLaneJob inserts.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	bundle := &testBundle{db: pgtest.NewPool(t)}
	fanouttest.CreatePool(t, bundle.db, bustype.PoolParams{Name: "ord", Ordering: bustype.OrderingKey})
	return context.Background(), bundle
}

// insertLaneJob inserts a job of pool "ord" in lane, in state, due a second
// ago, and returns its id.
func insertLaneJob(t *testing.T, db *pgxpool.Pool, lane, state string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(context.Background(), `INSERT INTO river_job (args, kind, metadata, queue, state, max_attempts, priority, attempt, scheduled_at)
		VALUES ('{}', 'ord', $1, 'ord', $2, 5, 1, 1, now() - interval '1 second') RETURNING id`, lanes.Metadata(lane), state).Scan(&id))
	return id
}

func jobState(t *testing.T, db *pgxpool.Pool, id int64) string {
	t.Helper()
	var state string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	return state
}

// The sweeper releases a lane left with a pending job and none in flight,
// and makes a lane job's due retry available at once; a lane with a job in
// flight keeps its pending job waiting.
func TestSweeperReleasesStuckLanesAndPromotesRetries(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	ctx, cancel := context.WithCancel(ctx)

	stuck := insertLaneJob(t, bundle.db, "stuck", "pending")
	retry := insertLaneJob(t, bundle.db, "retry", "retryable")
	waiting := insertLaneJob(t, bundle.db, "busy", "pending")
	running := insertLaneJob(t, bundle.db, "busy", "running")

	s := lanes.NewSweeper(bundle.db, &lanes.SweeperConfig{Logger: fanouttest.QuietLogger()})
	s.TestSignals.Init(t)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	first := s.TestSignals.Swept.WaitOrTimeout()
	require.Equal(t, int64(1), first.Promoted, "one queue with a due retry")
	require.Equal(t, int64(1), first.Released, "the first sweep looks for stuck lanes")
	require.Equal(t, "available", jobState(t, bundle.db, stuck))
	require.Equal(t, "available", jobState(t, bundle.db, retry))
	require.Equal(t, "pending", jobState(t, bundle.db, waiting), "its lane has a job in flight")
	require.Equal(t, "running", jobState(t, bundle.db, running))

	next := s.TestSignals.Swept.WaitOrTimeout()
	require.Zero(t, next.Promoted)
	require.Equal(t, int64(-1), next.Released, "stuck lanes are looked for every StuckLaneInterval")
}
