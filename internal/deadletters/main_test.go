package deadletters_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

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
