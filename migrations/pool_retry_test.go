package migrations_test

import (
	"context"
	"fmt"
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

// The rescue trigger's schedule (riverbus_rescue_retry, in
// sql/current/04_dead_letters.sql) is bustype.RetrySchedule's, which the
// River retry policy of pool jobs (package workers) uses: for every failure
// count, the same delay, and jitter shortens it by the same fraction.
func TestRescueRetryIsTheGoSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const failures = 60 // past every cap below, and past the SQL's exponent limit with factor 10 at 301
	for i, s := range []bustype.RetrySchedule{
		bustype.RetryScheduleDefault,
		{Base: 250 * time.Millisecond, Factor: 1.5, MaxDelay: time.Hour},
		{Base: time.Millisecond, Factor: 10, MaxDelay: 7 * 24 * time.Hour},
		{Base: 5 * time.Second, Factor: 1, MaxDelay: 5 * time.Second},
		{Base: 3 * time.Second, Factor: 2, MaxDelay: 24 * time.Hour, Jitter: 0.5},
	} {
		name := fmt.Sprintf("retry_%d", i)
		_, err := pool.Exec(ctx, `INSERT INTO riverbus_pool (name, start_after, cursor_seq, retry_base, retry_factor, retry_max_delay, retry_jitter)
			VALUES ($1, 0, 0, $2, $3, $4, $5)`, name, s.Base, s.Factor, s.MaxDelay, s.Jitter)
		require.NoError(t, err)
		// A running job per failure count n (the rescuer's error last), as
		// River's rescuer finds it; 301 for the exponent limit.
		_, err = pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, state, attempt, attempted_at, errors)
			SELECT '{}', $1, 1000, 'running', n, now(), ARRAY(
				SELECT jsonb_build_object('at', now(), 'attempt', a,
					'error', CASE WHEN a = n THEN 'Stuck job rescued by JobRescuer' ELSE 'failed' END)
				FROM generate_series(1, n) a)
			FROM (SELECT generate_series(1, $2) UNION ALL SELECT 301) g(n)`, name, failures)
		require.NoError(t, err)
		got := map[int]time.Duration{}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// The rescuer discards them; the trigger makes each retryable at
			// now() plus its delay (now() is the transaction's).
			rows, err := tx.Query(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE kind = $1
				RETURNING cardinality(errors), state::text, (extract(epoch FROM scheduled_at - now()) * 1000000)::bigint`, name)
			if err != nil {
				return err
			}
			var n int
			var state string
			var micros int64
			_, err = pgx.ForEachRow(rows, []any{&n, &state, &micros}, func() error {
				require.Equal(t, "retryable", state)
				got[n] = time.Duration(micros) * time.Microsecond
				return nil
			})
			return err
		}))
		require.Len(t, got, failures+1)
		for n, d := range got {
			want := s.Delay(n)
			if s.Jitter == 0 {
				// PostgreSQL keeps microseconds.
				require.InDelta(t, float64(want), float64(d), float64(time.Microsecond), "%s: failure %d", s, n)
				continue
			}
			require.LessOrEqual(t, d, want+time.Microsecond, "%s: failure %d", s, n)
			require.GreaterOrEqual(t, d, s.Jittered(want, 1)-time.Microsecond, "%s: failure %d", s, n)
		}
	}
}
