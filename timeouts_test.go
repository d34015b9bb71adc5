package riverbus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/workers"
)

// dbaTimeouts are what a DBA set for the whole database: far below what a
// catch-up's statements, lock waits and transactions take.
var dbaTimeouts = map[string]string{
	"statement_timeout":                   "30ms",
	"lock_timeout":                        "5ms",
	"idle_in_transaction_session_timeout": "20ms",
}

// limitedDatabase makes a migrated database with backlog events appended
// and the pools of pools created, then sets dbaTimeouts on it with ALTER
// DATABASE, which every session opened afterwards takes. It returns the
// database's URL.
func limitedDatabase(t *testing.T, backlog int, pools ...bustype.PoolParams) string {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	setup, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer setup.Close()
	admin, err := riverbus.NewClient(setup, nil)
	require.NoError(t, err)
	for _, p := range pools {
		_, _, err := admin.PoolCreate(ctx, p)
		require.NoError(t, err)
	}
	if backlog > 0 {
		_, err = setup.Exec(ctx, `INSERT INTO riverbus_event (type, key, data)
			SELECT 'InvoiceIssued', 'customer-' || (i % 50), jsonb_build_object('i', i) FROM generate_series(1, $1) AS i`, backlog)
		require.NoError(t, err)
	}
	pgtest.SetDatabaseDefaults(t, setup, dbaTimeouts)
	return url
}

// tallyWorker counts the jobs it worked, per pool (the job's kind).
type tallyWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	n *atomic.Int64
}

func (w *tallyWorker[T]) Work(context.Context, *river.Job[T]) error {
	w.n.Add(1)
	return nil
}

// configuredPool opens a pool to url made the riverbus way
// (riverbus.ConfigurePool), closed when the test ends.
func configuredPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 20
	riverbus.ConfigurePool(cfg)
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

type accountsArgs struct{ workers.Args }

func (accountsArgs) Kind() string { return "accounts" }

// TestDBATimeoutsStarveNothing: with a DBA's statement_timeout of 30 ms, a
// lock_timeout of 5 ms and an idle_in_transaction_session_timeout of 20 ms
// on the database, a backlog of 10,000 events reaches a plain and a
// key-ordered pool and every job completes: the horizon, the fan-out (and
// its ANALYZE of river_job), River's producers, completer and maintenance,
// and the lanes' hand-offs all run with riverbus's own session settings.
func TestDBATimeoutsStarveNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const backlog = 10_000
	url := limitedDatabase(t, backlog,
		bustype.PoolParams{Name: "billing"},
		bustype.PoolParams{Name: "accounts", Ordering: bustype.OrderingKey})

	db := configuredPool(t, url)

	var billing, accounts atomic.Int64
	ws := workers.NewRegistry()
	workers.Add(ws, &tallyWorker[billingArgs]{n: &billing}, &workers.AddOpts{MaxWorkers: 20})
	workers.Add(ws, &tallyWorker[accountsArgs]{n: &accounts}, &workers.AddOpts{MaxWorkers: 20})
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })

	// A hang guard, not a speed check: a quiet machine takes seconds, one
	// loaded far past its cores once took over two minutes for the 20,000
	// jobs, still moving.
	waitCtx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	for _, pool := range []string{"billing", "accounts"} {
		require.NoError(t, client.CheckpointWait(waitCtx, pool, backlog, nil),
			"pool %s: billing worked %d jobs, accounts %d", pool, billing.Load(), accounts.Load())
	}
	var notCompleted int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state <> 'completed'`).Scan(&notCompleted))
	require.Zero(t, notCompleted, "every job completed, none a dead letter or left running")
	require.GreaterOrEqual(t, billing.Load(), int64(backlog))
	require.GreaterOrEqual(t, accounts.Load(), int64(backlog))
}

// TestConfigurePoolSessionLimits: a pool made with ConfigurePool runs
// every session with riverbus's documented limits, over what ALTER
// DATABASE set, after the pool's own AfterConnect.
func TestConfigurePoolSessionLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := limitedDatabase(t, 0)

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET application_name = 'billing service'")
		return err
	}
	riverbus.ConfigurePool(cfg)
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)

	var statement, lock, idle, app string
	require.NoError(t, db.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
		current_setting('idle_in_transaction_session_timeout'), current_setting('application_name')`).Scan(&statement, &lock, &idle, &app))
	require.Equal(t, []string{"1min", "30s", "1min"}, []string{statement, lock, idle}, "statement_timeout, lock_timeout, idle_in_transaction_session_timeout")
	require.Equal(t, "billing service", app, "the pool's own AfterConnect ran too")
}

// TestStartRefusesSessionsLimitedBelowRiverbus: a Client over a pool whose
// sessions take a DBA's limits below riverbus's does not start, and says
// which setting, where it was set, and how to fix it; the same database
// through a pool made with ConfigurePool starts.
func TestStartRefusesSessionsLimitedBelowRiverbus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := limitedDatabase(t, 0, bustype.PoolParams{Name: "billing"})

	for _, withWorkers := range []bool{false, true} {
		cfg := &riverbus.Config{}
		if withWorkers {
			cfg.Workers = workers.NewRegistry()
			workers.Add(cfg.Workers, newRecorder[billingArgs](1), nil)
		}
		client, err := riverbus.NewClient(pgtest.Connect(t, url), cfg)
		require.NoError(t, err)
		err = client.Start(ctx)
		if err == nil {
			require.NoError(t, client.Stop(ctx))
		}
		var limitErr *bustype.SessionLimitError
		require.ErrorAs(t, err, &limitErr, "workers: %t", withWorkers)
		require.Equal(t, "idle_in_transaction_session_timeout", limitErr.Setting)
		require.Equal(t, "20ms", limitErr.Value)
		require.Equal(t, "database", limitErr.Source)
		require.ErrorContains(t, err, "idle_in_transaction_session_timeout = 20ms (set by ALTER DATABASE … SET)")
		require.ErrorContains(t, err, "riverbus.ConfigurePool")

		client, err = riverbus.NewClient(configuredPool(t, url), cfg)
		require.NoError(t, err)
		require.NoError(t, client.Start(ctx))
		require.NoError(t, client.Stop(ctx))
	}
}

// TestLockWaitNamesTheHolderUnderDBATimeouts: a riverbus lock wait that runs
// out names the holder although a DBA limits every statement of the
// database to a millisecond: the connection that looks for the holder is a
// riverbus session too.
func TestLockWaitNamesTheHolderUnderDBATimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := limitedDatabase(t, 0, bustype.PoolParams{Name: "orders"})
	db := configuredPool(t, url)
	pgtest.SetDatabaseDefaults(t, db, map[string]string{"statement_timeout": "1ms"})

	holder, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(ctx, fmt.Sprintf("LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE",
		pgx.Identifier{migrations.PrivateSchema("public"), "riverbus_retention_lock"}.Sanitize()))
	require.NoError(t, err)

	client, err := riverbus.NewClient(db, nil)
	require.NoError(t, err)
	_, err = client.PoolReset(ctx, "orders", 0)
	require.ErrorContains(t, err, fmt.Sprintf("held by pid %d", holder.Conn().PgConn().PID()))
}

// TestStartRefusesARoleLimitedBelowRiverbus: a limit set for the role
// (ALTER ROLE … SET) is refused as one set for the database is, and named
// as the role's; ConfigurePool overrides it.
func TestStartRefusesARoleLimitedBelowRiverbus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := pgtest.NewPool(t)
	login := pgtest.Login(t, owner, "riverbus_worker")
	role := login.Config().ConnConfig.User
	_, err := owner.Exec(ctx, fmt.Sprintf("ALTER ROLE %s SET statement_timeout = '30s'", pgx.Identifier{role}.Sanitize()))
	require.NoError(t, err)

	client, err := riverbus.NewClient(login, nil)
	require.NoError(t, err)
	err = client.Start(ctx)
	if err == nil {
		require.NoError(t, client.Stop(ctx))
	}
	var limitErr *bustype.SessionLimitError
	require.ErrorAs(t, err, &limitErr)
	require.Equal(t, "statement_timeout", limitErr.Setting)
	require.Equal(t, "30s", limitErr.Value)
	require.Equal(t, "user", limitErr.Source)
	require.ErrorContains(t, err, "statement_timeout = 30s (set by ALTER ROLE … SET), less than the 1m0s riverbus's statements may need")

	cfg := login.Config()
	riverbus.ConfigurePool(cfg)
	configured, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(configured.Close)
	client, err = riverbus.NewClient(configured, nil)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	require.NoError(t, client.Stop(ctx))
}
