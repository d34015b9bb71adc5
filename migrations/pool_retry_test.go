package migrations_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/migrations"
)

// migratedBelow returns a pool on a fresh database with River's migrations
// and riverbus's below version, recorded as Up records them, so a test can
// set up rows as an older schema had them before Up applies the rest.
func migratedBelow(t *testing.T, version int) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	all, err := migrations.All()
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE riverbus_migration (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	// As Up does: the private schema (018) exists, and each migration is
	// told its name.
	var private string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&private))
	private = migrations.PrivateSchema(private)
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{private}.Sanitize()+
		`; CREATE TABLE `+pgx.Identifier{private, "riverbus_migrate_lock"}.Sanitize()+` ()`)
	require.NoError(t, err)
	for _, m := range all {
		if m.Version >= version {
			break
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('riverbus.private_schema', $1, true)`, private); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO riverbus_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		}), m.Name)
	}
	return pool
}

// Migration 014: a pool that existed before keeps a long schedule (24 h
// at most between attempts), a pool made after gets the default, and the
// columns refuse what the policy could not use.
func TestPoolRetryScheduleColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migratedBelow(t, 14)
	_, err := db.Exec(ctx, `INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ('billing', 0, 0)`)
	require.NoError(t, err)
	_, err = migrations.Up(ctx, db)
	require.NoError(t, err)

	p, err := pools.Get(ctx, db, "billing")
	require.NoError(t, err)
	require.Equal(t, bustype.RetrySchedule{Base: time.Second, Factor: 2, MaxDelay: 24 * time.Hour, Jitter: 0.1}, p.Retry)
	_, _, err = pools.Create(ctx, db, bustype.PoolParams{Name: "audit"})
	require.NoError(t, err)
	p, err = pools.Get(ctx, db, "audit")
	require.NoError(t, err)
	require.Equal(t, bustype.RetrySchedule{Base: time.Second, Factor: 2, MaxDelay: 3 * time.Minute, Jitter: 0.1}, p.Retry)
	require.Equal(t, bustype.RetryScheduleDefault, p.Retry)

	for set, constraint := range map[string]string{
		`retry_base = '0'`: "riverbus_pool_retry_base",
		`retry_base = '-1 second', retry_max_delay = '1s'`: "riverbus_pool_retry_base",
		`retry_factor = 0.5`:                               "riverbus_pool_retry_factor",
		`retry_factor = 11`:                                "riverbus_pool_retry_factor",
		`retry_max_delay = '8 days'`:                       "riverbus_pool_retry_max_delay",
		`retry_max_delay = '1 mon'`:                        "riverbus_pool_retry_max_delay",
		`retry_max_delay = '500 milliseconds'`:             "riverbus_pool_retry_max_delay_base",
		`retry_jitter = 1.01`:                              "riverbus_pool_retry_jitter",
		`retry_jitter = -0.1`:                              "riverbus_pool_retry_jitter",
		`retry_base = '2 minutes', retry_max_delay = '1m'`: "riverbus_pool_retry_max_delay_base",
	} {
		_, err := db.Exec(ctx, `UPDATE riverbus_pool SET `+set+` WHERE name = 'billing'`)
		require.Equal(t, pgerrcode.CheckViolation, database.Code(err), "%s: %v", set, err)
		require.ErrorContains(t, err, constraint, set)
	}
}

// Workers read a pool's schedule (their retry policy does) but cannot
// change it: that is the owner's, as the pool's filter is.
func TestWorkerRoleReadsButCannotChangeRetrySchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	_, _, err := pools.Create(ctx, b.owner, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	worker := b.login(t, "riverbus_worker")
	var base time.Duration
	require.NoError(t, worker.QueryRow(ctx, `SELECT retry_base FROM riverbus_pool WHERE name = 'billing'`).Scan(&base))
	require.Equal(t, time.Second, base)
	requireDenied(t, worker,
		`UPDATE riverbus_pool SET retry_base = '1 minute', retry_max_delay = '1 hour'`,
		`UPDATE riverbus_pool SET retry_factor = 1`,
		`UPDATE riverbus_pool SET retry_jitter = 0`)
}
