package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/retention"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
)

// setupNeighbours gives the test a fresh migrated database in which PUBLIC
// keeps its default USAGE on the schema, as on most installations: any
// login may name riverbus's tables there, whatever its grants.
func setupNeighbours(t *testing.T) *rolesBundle {
	t.Helper()
	return setupDatabase(t, "GRANT USAGE ON SCHEMA %I TO PUBLIC")
}

// lockTables returns the qualified names of every table whose lock riverbus
// waits on, old and new: where they were before migration 018 (the schema
// riverbus is installed in) and wherever they are now.
func lockTables(t *testing.T, owner *pgxpool.Pool) []string {
	t.Helper()
	rows, err := owner.Query(context.Background(), `
SELECT DISTINCT q FROM (
	SELECT format('%I.%I', n.nspname, c.relname) AS q
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relname IN ('riverbus_horizon_lock', 'riverbus_retention_lock', 'riverbus_append_lock', 'riverbus_migrate_lock')
	UNION ALL
	SELECT format('%I.%I', current_schema(), t) FROM unnest(ARRAY['riverbus_horizon_lock', 'riverbus_retention_lock']) AS t
) s ORDER BY q`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// holdParseLocks has the login db parse, in transactions left open, a
// locking statement on every table of tables: each that PostgreSQL lets it
// parse holds that table's lock until the test ends. The others must be
// refused (no USAGE on the schema, or no such table).
func holdParseLocks(t *testing.T, db *pgxpool.Pool, tables []string) (held []string) {
	t.Helper()
	ctx := context.Background()
	for _, table := range tables {
		for _, stmt := range []string{
			"SELECT * FROM %s FOR UPDATE", // ROW SHARE: conflicts with the round's EXCLUSIVE
			"DELETE FROM %s",              // ROW EXCLUSIVE: conflicts with retention's SHARE ROW EXCLUSIVE
		} {
			conn, err := db.Acquire(ctx)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, "SET application_name = 'neighbour'")
			require.NoError(t, err)
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "PREPARE p AS "+fmt.Sprintf(stmt, table))
			if err != nil {
				require.Contains(t, []string{pgerrcode.InsufficientPrivilege, pgerrcode.UndefinedTable}, database.Code(err), "%s: %v", table, err)
				_ = tx.Rollback(ctx)
				conn.Release()
				continue
			}
			held = append(held, fmt.Sprintf(stmt, table))
			t.Cleanup(func() {
				_ = tx.Rollback(context.Background())
				conn.Release()
			})
		}
	}
	return held
}

// holdOldAdvisoryKeys has the login db hold every advisory lock riverbus
// used to wait on: the horizon round's, migrate's, and AppendIf's keys for
// tags.
func holdOldAdvisoryKeys(t *testing.T, db *pgxpool.Pool, tags ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock_all()")
		conn.Release()
	})
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock(1919054195, 1752134249), pg_advisory_lock(1919055219, 1835624306)`)
	require.NoError(t, err)
	for _, tag := range tags {
		h := fnv.New64a()
		h.Write([]byte("riverbus.outbox.tag\x00" + tag))
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(h.Sum64()))
		require.NoError(t, err)
	}
}

// A login with no riverbus grant, and one in riverbus_app, parse locking
// statements on every lock table riverbus waits on (old and new names) and
// on the advisory keys riverbus used, and sit idle in their transactions.
// Delivery, retention, pool reset, AppendIf and migrate all go on.
func TestNeighbourParseTimeLocksStopNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupNeighbours(t)
	worker := b.login(t, "riverbus_worker")
	app := b.login(t, "riverbus_app")
	_, _, err := pools.Create(ctx, b.owner, bustype.PoolParams{Name: "orders"})
	require.NoError(t, err)
	_, err = retention.SetPolicy(ctx, b.owner, true, 0)
	require.NoError(t, err)

	tables := lockTables(t, b.owner)
	var held []string
	for _, group := range []string{"", "riverbus_app"} {
		neighbour := b.login(t, group)
		held = append(held, holdParseLocks(t, neighbour, tables)...)
		if group == "" {
			holdOldAdvisoryKeys(t, neighbour, "order=1")
		}
	}
	t.Logf("the neighbours hold: %s", strings.Join(held, "; "))

	within := func(d time.Duration) (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, d) }

	// AppendIf.
	appendCtx, cancel := within(30 * time.Second)
	defer cancel()
	for i := range 2 {
		_, err := outbox.AppendIf(appendCtx, app, outbox.AppendCondition{
			FailIfEventsMatch: outbox.Query{{Tags: []string{"order=1"}}}, After: int64(i),
		}, outbox.Event{Type: "order.placed", Key: "c1", Tags: []string{"order=1"}, Data: json.RawMessage(`{}`)})
		require.NoError(t, err, "AppendIf behind the neighbours' locks")
	}

	// The horizon and the fan-out.
	f, err := fanout.New(worker, &fanout.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	passCtx, cancel := within(30 * time.Second)
	defer cancel()
	pass, err := f.Pass(passCtx)
	require.NoError(t, err)
	require.True(t, pass.Horizon.Locked, "the round got its lock")
	require.EqualValues(t, 2, pass.Horizon.Horizon)
	var jobs int
	require.NoError(t, worker.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'orders'`).Scan(&jobs))
	require.Equal(t, 2, jobs)

	// Retention and a pool reset at the same time: a reset's lock queues
	// behind a batch waiting for its own, so a stuck batch stops resets too.
	trimCtx, cancel := within(30 * time.Second)
	defer cancel()
	trimmed := make(chan error, 1)
	go func() {
		_, err := retention.Trim(trimCtx, worker, nil)
		trimmed <- err
	}()
	// The reset starts once the batch is done or waits for a lock.
	var trimErr error
	trimDone := false
	require.Eventually(t, func() bool {
		select {
		case trimErr = <-trimmed:
			trimDone = true
			return true
		default:
		}
		var waiting bool
		err := b.owner.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond)
	resetCtx, cancel := within(30 * time.Second)
	defer cancel()
	_, err = pools.Reset(resetCtx, worker, "orders", 1)
	require.NoError(t, err, "pool reset behind the neighbours' locks")
	if !trimDone {
		trimErr = <-trimmed
	}
	require.NoError(t, trimErr, "retention behind the neighbours' locks")

	// Migrate.
	upCtx, cancel := within(60 * time.Second)
	defer cancel()
	_, err = migrations.Up(upCtx, b.owner)
	require.NoError(t, err, "migrate behind the neighbours' locks")
}

// A wait that does run out names who held the lock: here the owner itself,
// in a retention batch left open, holds what a pool reset waits for; and in
// a pool reset left open, what retention waits for.
func TestLockWaitNamesTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupNeighbours(t)
	worker := b.login(t, "riverbus_worker")
	_, _, err := pools.Create(ctx, b.owner, bustype.PoolParams{Name: "orders"})
	require.NoError(t, err)
	_, err = retention.SetPolicy(ctx, b.owner, true, 0)
	require.NoError(t, err)
	var ownerRole string
	require.NoError(t, b.owner.QueryRow(ctx, `SELECT current_user`).Scan(&ownerRole))

	// hold runs sql as the owner in a transaction left open until release.
	hold := func(sql string) (pid uint32, release func()) {
		conn, err := b.owner.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "SET application_name = 'held by the test'")
		require.NoError(t, err)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		release = func() {
			_ = tx.Rollback(context.Background())
			conn.Release()
		}
		t.Cleanup(release)
		_, err = tx.Exec(ctx, sql)
		require.NoError(t, err)
		return conn.Conn().PgConn().PID(), release
	}
	// The holder's state shows only to its own role and to members of
	// pg_read_all_stats (here the owner, a superuser), not to the worker.
	want := func(err error, op string, pid uint32, state string) {
		t.Helper()
		require.Error(t, err)
		msg := err.Error()
		require.Contains(t, msg, op+": waited 5s for lock on ")
		require.Contains(t, msg, "riverbus_retention_lock held by pid "+fmt.Sprint(pid)+" (role "+ownerRole+`, application_name "held by the test"`+state)
	}

	step, release := hold(`SELECT * FROM riverbus_retention_step(NULL, NULL, NULL, 1, true)`)
	resetCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = pools.Reset(resetCtx, b.owner, "orders", 0)
	want(err, "pool reset", step, ", idle in transaction for ")
	_, err = pools.Reset(resetCtx, worker, "orders", 0)
	want(err, "pool reset", step, ")")
	release()

	reset, _ := hold(`SELECT riverbus_retention_start_lock()`)
	trimCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = retention.Trim(trimCtx, worker, nil)
	want(err, "retention", reset, ")")
}
