package checkpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is what a checkpoints test works with.
type testBundle struct {
	db *pgxpool.Pool // a database of its own, migrated, with no pools yet
}

// setup gives the test a fresh database; tests create the pools and jobs
// they need with the helpers below.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	return context.Background(), &testBundle{db: pgtest.NewPool(t)}
}

// poolJobArgs is a pool job as the fan-out writes it: kind = pool name, args
// = the event envelope.
type poolJobArgs struct {
	workers.Args
	pool string
}

func (a poolJobArgs) Kind() string { return a.pool }

// createPool inserts a pool row the way the fan-out's CreatePool would.
func createPool(t *testing.T, db *pgxpool.Pool, name, queue string, cursor int64) {
	t.Helper()
	_, err := db.Exec(context.Background(),
		`INSERT INTO riverbus_pool (name, queue, start_after, cursor_seq) VALUES ($1, $2, 0, $3)`,
		name, queue, cursor)
	require.NoError(t, err)
}

// insertJobs inserts one job of pool per sequence and returns their ids in
// the same order.
func insertJobs(t *testing.T, db *pgxpool.Pool, pool, queue string, seqs ...int64) []int64 {
	t.Helper()
	ctx := context.Background()
	client, err := river.NewClient(workers.NewDriver(db, nil), &river.Config{})
	require.NoError(t, err)
	params := make([]river.InsertManyParams, len(seqs))
	for i, seq := range seqs {
		params[i] = river.InsertManyParams{
			Args: poolJobArgs{pool: pool, Args: workers.Args{Event: outbox.Event{
				GlobalSequence: seq,
				Type:           "thing.happened",
				Key:            fmt.Sprintf("k%d", seq),
				Data:           json.RawMessage(`{}`),
				Metadata:       json.RawMessage(`{}`),
				OccurredAt:     time.Now(),
			}}},
			InsertOpts: &river.InsertOpts{Queue: queue, MaxAttempts: 3},
		}
	}
	res, err := client.InsertMany(ctx, params)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// finish moves jobs to a finalized state the way River would.
func finish(t *testing.T, db *pgxpool.Pool, state string, ids ...int64) {
	t.Helper()
	tag, err := db.Exec(context.Background(),
		`UPDATE river_job SET state = $1::river_job_state, finalized_at = now() WHERE id = ANY($2)`, state, ids)
	require.NoError(t, err)
	require.Equal(t, int64(len(ids)), tag.RowsAffected())
}

func setHorizon(t *testing.T, db *pgxpool.Pool, h int64) {
	t.Helper()
	_, err := db.Exec(context.Background(), `UPDATE riverbus_horizon SET horizon = $1`, h)
	require.NoError(t, err)
}

func setCursor(t *testing.T, db *pgxpool.Pool, pool string, cursor int64) {
	t.Helper()
	_, err := db.Exec(context.Background(), `UPDATE riverbus_pool SET cursor_seq = $2 WHERE name = $1`, pool, cursor)
	require.NoError(t, err)
}
