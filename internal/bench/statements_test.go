package bench

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// The latency scenarios' database time per event: tracked only where the
// server loads pg_stat_statements and the database asks for it, counted
// from the reset on.
func TestStatementsTotals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ServerWithoutTheModule", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
		require.NoError(t, err)
		defer pool.Close()
		require.False(t, benchkit.CreateStatementsExtension(ctx, pool), "the test server does not load pg_stat_statements")
	})

	t.Run("Tracked", func(t *testing.T) {
		t.Parallel()
		if !pgserver.HasLibrary("pg_stat_statements") {
			t.Skip("this PostgreSQL has no pg_stat_statements")
		}
		srv, err := pgserver.Start(ctx, pgserver.Opts{Settings: map[string]string{
			"shared_preload_libraries": "pg_stat_statements",
			"pg_stat_statements.track": "none",
		}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Stop() })
		kit, _, err := benchkit.NewEnv(ctx, "bench", Opts{DatabaseURL: srv.URL("postgres"), Logger: slog.Default()}, defaults, ScenarioNames())
		require.NoError(t, err)
		defer kit.Close()
		e := &env{Env: kit}
		tpl, tracked, err := kit.CreateTemplate(ctx, func(context.Context, *pgxpool.Pool) error { return nil })
		require.NoError(t, err)
		e.statements = tracked
		require.True(t, e.statements)

		measured, err := kit.NewDatabase(ctx, tpl)
		require.NoError(t, err)
		d := &database{Database: measured, e: e}
		require.True(t, d.trackStatements(ctx))
		pool, err := pgxpool.New(ctx, d.URL)
		require.NoError(t, err)
		defer pool.Close()
		other, err := pgxpool.New(ctx, srv.URL(tpl))
		require.NoError(t, err)
		defer other.Close()

		s := &statements{db: pool}
		// The sleeps not counted are far longer than the ten counted ones,
		// so a machine busy with other work cannot blur the difference.
		_, err = pool.Exec(ctx, "SELECT pg_sleep(0.5)") // before the reset: not counted
		require.NoError(t, err)
		require.NoError(t, s.reset(ctx))
		for range 10 {
			_, err := pool.Exec(ctx, "SELECT pg_sleep(0.002)")
			require.NoError(t, err)
			// Another database's statements are not this one's, and one
			// that does not track counts nothing.
			_, err = other.Exec(ctx, "SELECT pg_sleep(0.05)")
			require.NoError(t, err)
		}
		ms, calls, err := s.totals(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, calls, int64(10))
		require.Less(t, calls, int64(15), "the reset and the read, at most, besides the ten")
		require.GreaterOrEqual(t, ms, 20.0, "ten sleeps of 2 ms")
		require.Less(t, ms, 500.0, "neither the sleep before the reset nor the other database's")
	})
}
