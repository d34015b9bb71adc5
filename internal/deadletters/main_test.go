package deadletters_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/workers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is what a dead letter test works with.
type testBundle struct {
	db *pgxpool.Pool // a database of its own, migrated, with no pools yet
	// client is an insert-only River client on db, for River's side of a
	// dead letter (JobRetry, as River UI's retry button does).
	client *river.Client[pgx.Tx]
}

// setup gives the test a fresh database and a River client on it; tests
// create the pools, workers and jobs they need.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	db := pgtest.NewPool(t)
	client, err := river.NewClient(workers.NewDriver(db, jobtest.DiscardLogger), &river.Config{Logger: jobtest.DiscardLogger})
	require.NoError(t, err)
	return context.Background(), &testBundle{db: db, client: client}
}

func listDeadLetters(t testing.TB, db *pgxpool.Pool, pool string) []bustype.DeadLetter {
	t.Helper()
	dls, err := deadletters.List(context.Background(), db, bustype.DeadLetterListParams{Pool: pool})
	require.NoError(t, err)
	return dls
}

func deadLetterIDs(dls []bustype.DeadLetter) []int64 {
	ids := make([]int64, len(dls))
	for i, d := range dls {
		ids[i] = d.JobID
	}
	return slices.Sorted(slices.Values(ids))
}
