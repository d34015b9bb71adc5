package pgserver_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgserver"
)

func TestStartRestartStop(t *testing.T) {
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Opts{})
	require.NoError(t, err)
	defer srv.Stop() //nolint:errcheck

	query := func() int { return count(t, srv, "SELECT count(*) FROM pg_tables WHERE tablename = 'kept'") }
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	// Two-phase commit is on by default (tests of prepared writers need it).
	var prepared string
	require.NoError(t, conn.QueryRow(ctx, "SHOW max_prepared_transactions").Scan(&prepared))
	require.Equal(t, "64", prepared)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (id int)")
	require.NoError(t, err)

	require.NoError(t, srv.Restart(ctx))
	// The old connection was cut by the restart; data survived it.
	require.Error(t, conn.Ping(ctx))
	require.Equal(t, 1, query())

	// A crash keeps what committed synchronously and runs recovery.
	conn, err = pgx.Connect(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO kept VALUES (1)")
	require.NoError(t, err)
	require.NoError(t, srv.Crash(ctx))
	require.Error(t, conn.Ping(ctx))
	conn, err = pgx.Connect(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	var rows int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&rows))
	require.Equal(t, 1, rows)
	conn.Close(ctx)

	dataDir := srv.DataDir()
	require.NoError(t, srv.Stop())
	_, err = os.Stat(dataDir)
	require.True(t, os.IsNotExist(err), "data directory removed")
	require.NoError(t, srv.Stop(), "Stop twice is fine")
}

func TestMissingBinariesSayWhatToInstall(t *testing.T) {
	_, err := pgserver.Start(context.Background(), pgserver.Opts{BinDir: t.TempDir()})
	require.ErrorIs(t, err, pgserver.ErrNoBinaries)
	require.Contains(t, err.Error(), "apt-get install -y postgresql")
}

// HasLibrary finds the modules every server installation ships (plpgsql)
// and not one that does not exist; the bench loads pg_stat_statements only
// when it says so.
func TestHasLibrary(t *testing.T) {
	if _, err := pgserver.FindBinDir(); err != nil {
		t.Skip("no PostgreSQL binaries")
	}
	require.True(t, pgserver.HasLibrary("plpgsql"))
	require.False(t, pgserver.HasLibrary("riverbus_no_such_module"))
}

// A missing pgbouncer says how to install it (the pooler tests fail with
// this message rather than skip).
func TestStartPgBouncerWithoutTheBinary(t *testing.T) {
	_, err := (&pgserver.Server{}).StartPgBouncer(context.Background(), pgserver.PgBouncerOpts{Binary: "/nonexistent/pgbouncer"})
	require.ErrorIs(t, err, pgserver.ErrNoPgBouncer)
	require.ErrorContains(t, err, "apt-get install -y pgbouncer")
}

func TestStandbyPromote(t *testing.T) {
	ctx := context.Background()
	primary, err := pgserver.Start(ctx, pgserver.Opts{})
	require.NoError(t, err)
	defer primary.Stop() //nolint:errcheck
	exec := func(srv *pgserver.Server, sql string) {
		conn, err := pgx.Connect(ctx, srv.URL("postgres"))
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(primary, "CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)")

	standby, err := primary.StartStandby(ctx)
	require.NoError(t, err)
	defer standby.Stop() //nolint:errcheck
	require.NoError(t, standby.CaughtUp(ctx, primary))
	require.Equal(t, 1, count(t, standby, "SELECT count(*) FROM kept"))

	// After the cut, the primary's commits stay on the primary: lost with it.
	require.NoError(t, standby.CutReplication(ctx))
	exec(primary, "INSERT INTO kept VALUES (2)")
	primary.Kill()
	require.NoError(t, standby.Promote(ctx))
	exec(standby, "INSERT INTO kept VALUES (3)")
	require.Equal(t, 2, count(t, standby, "SELECT count(*) FROM kept"))
}

// count runs a query that returns one number on a new connection to srv.
func count(t *testing.T, srv *pgserver.Server, query string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, query).Scan(&n))
	return n
}
