package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
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

	results := upTwiceAtOnce(ctx, t, pool)
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

// upTwiceAtOnce runs two Ups on pool at the same time and returns their
// results, failing the test if either fails.
func upTwiceAtOnce(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []*migrations.UpResult {
	t.Helper()
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
	return results
}

func TestVersionOfEmptyDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	v, err := migrations.Version(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, 0, v)
}

// TestUpUnderDBATimeouts: a DBA's limits of one millisecond on every
// statement, lock wait and idle transaction of the database stop neither
// two concurrent Ups nor the River migrations: migrate's sessions set their
// own limits.
func TestUpUnderDBATimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	admin := pgtest.Connect(t, url)
	pgtest.SetDatabaseDefaults(t, admin, map[string]string{
		"statement_timeout": "1ms", "lock_timeout": "1ms", "idle_in_transaction_session_timeout": "1ms",
	})
	pool := pgtest.Connect(t, url) // its sessions take the database's limits

	all, err := migrations.All()
	require.NoError(t, err)
	results := upTwiceAtOnce(ctx, t, pool)
	require.Equal(t, len(all), len(results[0].Riverbus)+len(results[1].Riverbus))

	again, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, again.River)
	require.Empty(t, again.Riverbus)
}
