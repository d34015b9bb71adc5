package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/migrations"
)

// A login with no grant at all parses a DELETE on river_job, in a schema
// PUBLIC may use, and sits idle: its lock conflicts with the DDL of any
// migration of the table. The migration waits its statement lock timeout,
// fails naming the neighbour, and leaves nothing applied. (The bound leaves
// the watch time to connect and look on a shared test server loaded past
// its cores: 5 s was once not enough for a new backend to answer.)
func TestMigrationWaitNamesTheNeighbour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupNeighbours(t)
	owner := b.owner
	pool := b.login(t, "")
	neighbour, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer neighbour.Release()
	var name string
	require.NoError(t, neighbour.QueryRow(ctx, "SELECT current_user").Scan(&name))
	_, err = neighbour.Exec(ctx, "SET application_name = 'neighbour'")
	require.NoError(t, err)
	_, err = neighbour.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	defer neighbour.Exec(context.Background(), "ROLLBACK") //nolint:errcheck
	_, err = neighbour.Exec(ctx, "PREPARE p AS DELETE FROM river_job")
	require.NoError(t, err, "PostgreSQL lets a login without grants parse it")

	all, err := migrations.All()
	require.NoError(t, err)
	before, err := migrations.Version(ctx, owner)
	require.NoError(t, err)
	all = append(all, migrations.Migration{Version: 9999, Name: "alter_river_job", SQL: `ALTER TABLE river_job ADD COLUMN riverbus_test integer`})
	upCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	_, err = migrations.UpWithMigrations(upCtx, owner, &migrations.UpOpts{StatementLockTimeout: 15 * time.Second}, all)
	var lockErr *database.LockWaitError
	require.ErrorAs(t, err, &lockErr)
	require.Equal(t, "migrate: apply 9999_alter_river_job", lockErr.Op)
	require.Contains(t, lockErr.Lock, "river_job")
	require.Len(t, lockErr.Holders, 1)
	require.Equal(t, int32(neighbour.Conn().PgConn().PID()), lockErr.Holders[0].PID)
	require.Equal(t, name, lockErr.Holders[0].Role)
	require.Equal(t, "neighbour", lockErr.Holders[0].ApplicationName)
	require.Contains(t, err.Error(), fmt.Sprintf(`migrate: apply 9999_alter_river_job: waited 15s for lock on river_job held by pid %d (role %s, application_name "neighbour", idle in transaction for`,
		neighbour.Conn().PgConn().PID(), name))
	after, err := migrations.Version(ctx, owner)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// Two installs in one database, in two schemas, each get a private schema
// of their own, and each one's locks work.
func TestTwoInstallsHaveTheirOwnPrivateSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	admin := pgtest.Connect(t, url)
	long := "tenant_with_a_name_long_enough_to_need_the_hashed_form_x"
	var privates []string
	for _, schema := range []string{"tenant_a", long} {
		_, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		_, err = migrations.Up(ctx, pool)
		require.NoError(t, err)
		var private string
		require.NoError(t, pool.QueryRow(ctx, `SELECT riverbus_private_schema()`).Scan(&private))
		require.Equal(t, migrations.PrivateSchema(schema), private)
		require.LessOrEqual(t, len(private), 63)
		privates = append(privates, private)
		var locked bool
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT riverbus_horizon_try_lock()`).Scan(&locked)
		}))
		require.True(t, locked)
	}
	require.NotEqual(t, privates[0], privates[1])
	require.Equal(t, "riverbus_private_tenant_a", privates[0])
}
