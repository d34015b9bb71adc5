package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestUpConcurrentThenIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))

	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)

	var wg sync.WaitGroup
	results := make([]*migrations.UpResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = migrations.Up(ctx, pool)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	// Exactly one of the two applied everything; the other found nothing to do.
	applied := len(results[0].Riverbus) + len(results[1].Riverbus)
	require.Equal(t, len(all), applied)
	require.True(t, len(results[0].River) == 0 || len(results[1].River) == 0)
	require.NotEmpty(t, append(results[0].River, results[1].River...))

	version, err := migrations.Version(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, all[len(all)-1].Version, version)

	for _, table := range []string{"riverbus_event", "riverbus_command", "riverbus_pool", "riverbus_horizon", "river_job"} {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
		require.True(t, exists, table)
	}

	third, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, third.River)
	require.Empty(t, third.Riverbus)
}

func TestVersionOfEmptyDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	v, err := migrations.Version(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, 0, v)
}
