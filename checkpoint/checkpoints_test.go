package checkpoint_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/workers"
)

func TestAdvance(t *testing.T) {
	t.Parallel()

	t.Run("LowestUnfinishedMinusOne", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		createPool(t, bundle.db, "orders", "orders", 5)
		ids := insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3, 4, 5)
		finish(t, bundle.db, "completed", ids[0], ids[1])

		got, err := checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(2), got)

		var stored int64
		require.NoError(t, bundle.db.QueryRow(ctx, `SELECT checkpoint_seq FROM riverbus_pool_checkpoint WHERE pool = 'orders'`).Scan(&stored))
		require.Equal(t, int64(2), stored)

		// A finished job above an unfinished one does not help.
		finish(t, bundle.db, "completed", ids[3])
		got, err = checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(2), got)

		finish(t, bundle.db, "completed", ids[2])
		got, err = checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(4), got)
	})

	t.Run("AllFinishedIsCursor", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		createPool(t, bundle.db, "orders", "orders", 5)
		ids := insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3, 4, 5)
		finish(t, bundle.db, "completed", ids[0], ids[1], ids[2])
		finish(t, bundle.db, "cancelled", ids[3])
		finish(t, bundle.db, "discarded", ids[4])

		got, err := checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(5), got)

		// Events 6 and 7 were filtered out: the cursor moved without jobs.
		setCursor(t, bundle.db, "orders", 7)
		got, err = checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(7), got)
	})

	t.Run("NoJobsIsCursor", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		createPool(t, bundle.db, "orders", "orders", 42)
		got, err := checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(42), got)
	})

	t.Run("DiscardedCountsAsFinished", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		createPool(t, bundle.db, "orders", "orders", 3)
		ids := insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3)
		finish(t, bundle.db, "discarded", ids[0])
		finish(t, bundle.db, "completed", ids[1])

		got, err := checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(2), got)

		// The discarded job is a dead letter, not an unfinished job.
		var deadLetters int
		require.NoError(t, bundle.db.QueryRow(ctx, `SELECT count(*) FROM riverbus_dead_letter WHERE pool = 'orders'`).Scan(&deadLetters))
		require.Equal(t, 1, deadLetters)
	})

	t.Run("OtherPoolsAndKindsDoNotCount", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		createPool(t, bundle.db, "orders", "orders", 3)
		createPool(t, bundle.db, "billing", "billing", 3)
		insertJobs(t, bundle.db, "billing", "billing", 1, 2, 3)
		// A job of the pool whose args carry no valid sequence is ignored.
		_, err := bundle.db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state)
			VALUES ('{"global_sequence": "not a number"}', 'orders', 1, 1, 'orders', 'available')`)
		require.NoError(t, err)

		got, err := checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(3), got)
		got, err = checkpoint.Advance(ctx, bundle.db, "billing")
		require.NoError(t, err)
		require.Equal(t, int64(0), got)
	})

	t.Run("NeverMovesBackward", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		createPool(t, bundle.db, "orders", "orders", 5)
		ids := insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3, 4, 5)
		finish(t, bundle.db, "completed", ids...)

		got, err := checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(5), got)

		// A cursor set lower (an operator rewinding it, say) does not pull
		// the checkpoint back.
		setCursor(t, bundle.db, "orders", 1)
		got, err = checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(5), got)

		// Nor does an unfinished job below it (a late event, a retried dead
		// letter).
		setCursor(t, bundle.db, "orders", 6)
		insertJobs(t, bundle.db, "orders", "orders", 3)
		got, err = checkpoint.Advance(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(5), got)

		st, err := checkpoint.Get(ctx, bundle.db, "orders")
		require.NoError(t, err)
		require.Equal(t, int64(5), st.Checkpoint)
	})

	t.Run("UnknownPool", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setup(t)
		_, err := checkpoint.Advance(ctx, bundle.db, "nope")
		require.ErrorIs(t, err, bustype.ErrUnknownPool)
		require.EqualError(t, err, `unknown pool "nope": no pools exist yet`)

		createPool(t, bundle.db, "orders", "orders", 0)
		createPool(t, bundle.db, "billing", "billing", 0)
		_, err = checkpoint.Advance(ctx, bundle.db, "nope")
		require.ErrorIs(t, err, bustype.ErrUnknownPool)
		require.EqualError(t, err, `unknown pool "nope": pools are billing, orders`)
	})
}

// TestAdvanceOneSnapshot checks that Advance pairs the cursor and the jobs
// from the same snapshot. A fan-out batch commits its jobs and its cursor
// move together; Advance's UPDATE waits for that transaction's row lock and
// then sees the new row version, but must not combine the new cursor with the
// jobs it read before the batch committed.
func TestAdvanceOneSnapshot(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	createPool(t, bundle.db, "orders", "orders", 10) // checkpoint 0, cursor 10, no jobs

	// A fan-out batch: pool row locked, jobs 11..20 inserted, cursor moved to
	// 20, not committed yet.
	fanout, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer fanout.Rollback(ctx) //nolint:errcheck
	_, err = fanout.Exec(ctx, `SELECT 1 FROM riverbus_pool WHERE name = 'orders' FOR UPDATE`)
	require.NoError(t, err)
	inserter, err := river.NewClient(workers.NewDriver(bundle.db, nil), &river.Config{})
	require.NoError(t, err)
	var params []river.InsertManyParams
	for seq := int64(11); seq <= 20; seq++ {
		params = append(params, river.InsertManyParams{
			Args:       poolJobArgs{pool: "orders", Args: argsAt(seq)},
			InsertOpts: &river.InsertOpts{Queue: "orders"},
		})
	}
	_, err = inserter.InsertManyTx(ctx, fanout, params)
	require.NoError(t, err)
	_, err = fanout.Exec(ctx, `UPDATE riverbus_pool SET cursor_seq = 20 WHERE name = 'orders'`)
	require.NoError(t, err)

	type result struct {
		seq int64
		err error
	}
	done := make(chan result, 1)
	var advancePID uint32
	conn, err := bundle.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	advancePID = conn.Conn().PgConn().PID()
	go func() {
		seq, err := checkpoint.Advance(ctx, conn.Conn(), "orders")
		done <- result{seq, err}
	}()

	// Advance computed 10 from its snapshot and now waits for the row lock.
	testwait.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		err := bundle.db.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, advancePID).Scan(&waiting)
		return err == nil && waiting
	}, "Advance waiting for the pool row lock")
	require.NoError(t, fanout.Commit(ctx))

	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, int64(10), res.seq, "the new cursor must not be paired with the old jobs")

	got, err := checkpoint.Advance(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(10), got, "jobs 11..20 are unfinished")
}

func TestAdvanceAll(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	got, err := checkpoint.AdvanceAll(ctx, bundle.db)
	require.NoError(t, err)
	require.Empty(t, got)

	createPool(t, bundle.db, "orders", "orders", 3)
	createPool(t, bundle.db, "billing", "billing", 3)
	createPool(t, bundle.db, "audit", "audit", 9)
	ids := insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3)
	finish(t, bundle.db, "completed", ids[0])
	insertJobs(t, bundle.db, "billing", "billing", 1, 2, 3)

	got, err = checkpoint.AdvanceAll(ctx, bundle.db)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"orders": 1, "billing": 0, "audit": 9}, got)
}

func TestGet(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	createPool(t, bundle.db, "orders", "orders", 5)
	setHorizon(t, bundle.db, 8)
	ids := insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3, 4, 5)
	finish(t, bundle.db, "completed", ids[0], ids[1])

	st, err := checkpoint.Get(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, checkpoint.Status{Pool: "orders", Horizon: 8, Cursor: 5, Checkpoint: 0, Lag: 8}, st, "Get does not advance")

	_, err = checkpoint.Advance(ctx, bundle.db, "orders")
	require.NoError(t, err)
	st, err = checkpoint.Get(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, checkpoint.Status{Pool: "orders", Horizon: 8, Cursor: 5, Checkpoint: 2, Lag: 6}, st)

	_, err = checkpoint.Get(ctx, bundle.db, "nope")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.EqualError(t, err, `unknown pool "nope": pools are orders`)
}

// eventArgs is a worker args type for pool "orders".
type eventArgs struct{ workers.Args }

func (eventArgs) Kind() string { return "orders" }

type completeWorker struct {
	river.WorkerDefaults[eventArgs]
	release chan struct{}
}

func (w *completeWorker) Work(ctx context.Context, job *river.Job[eventArgs]) error {
	if job.Args.GlobalSequence == 3 {
		select {
		case <-w.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	createPool(t, bundle.db, "orders", "orders", 4)
	insertJobs(t, bundle.db, "orders", "orders", 1, 2, 3, 4)

	w := &completeWorker{release: make(chan struct{})}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	cfg, err := workers.RiverConfig(workers.RiverOpts{Queues: map[string]int{"orders": 4}, Workers: ws})
	require.NoError(t, err)
	cfg.TestOnly = true
	client, err := river.NewClient(workers.NewDriver(bundle.db, cfg.Logger), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})

	// Jobs 1 and 2 finish, 3 is held: waiting for 2 returns, for 3 times out.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, checkpoint.WaitFor(wctx, bundle.db, "orders", 2, nil))

	shortCtx, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	err = checkpoint.WaitFor(shortCtx, bundle.db, "orders", 3, &checkpoint.WaitOpts{PollInterval: 5 * time.Millisecond})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	close(w.release)
	require.NoError(t, checkpoint.WaitFor(wctx, bundle.db, "orders", 4, nil))
	st, err := checkpoint.Get(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Checkpoint)

	err = checkpoint.WaitFor(wctx, bundle.db, "nope", 1, nil)
	require.ErrorIs(t, err, bustype.ErrUnknownPool)

	err = checkpoint.WaitFor(wctx, bundle.db, "orders", 1, &checkpoint.WaitOpts{PollInterval: -time.Second})
	require.EqualError(t, err, "PollInterval must not be negative, got -1s")
}

// TestAdvanceUsesIndex proves the planner answers Advance from the partial
// index riverbus_job_unfinished_sequence, with and without a generic plan,
// when the pool has many finished jobs.
func TestAdvanceUsesIndex(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	createPool(t, bundle.db, "orders", "orders", 20_010)
	_, err := bundle.db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, finalized_at)
		SELECT jsonb_build_object('global_sequence', g, 'type', 'thing.happened', 'data', jsonb_build_object('n', g)),
		       k, 3, 1, 'orders', 'completed', now()
		FROM generate_series(1, 20000) AS g, (VALUES ('orders'), ('billing')) AS kinds(k)`)
	require.NoError(t, err)
	insertJobs(t, bundle.db, "orders", "orders", 20_001, 20_005, 20_010)
	_, err = bundle.db.Exec(ctx, `ANALYZE river_job`)
	require.NoError(t, err)

	// EXPLAIN EXECUTE of a prepared statement shows the plan the server
	// really uses, generic ($1 unknown at planning) or custom.
	conn, err := bundle.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// GetHolder's query reads the same index, in order, without a sort.
	for name, sql := range map[string]string{"advance": checkpoint.SQLAdvance, "holder": checkpoint.SQLHolder} {
		_, err = conn.Exec(ctx, "PREPARE "+name+"(text) AS "+sql)
		require.NoError(t, err)
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"('orders')")
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			plan := strings.Join(lines, "\n")
			require.Contains(t, plan, "Index Scan using riverbus_job_unfinished_sequence on river_job", "%s %s:\n%s", name, mode, plan)
			require.NotContains(t, plan, "Seq Scan on river_job", "%s %s:\n%s", name, mode, plan)
			require.NotContains(t, plan, "Sort", "%s %s:\n%s", name, mode, plan)
			if mode == "force_generic_plan" && name == "holder" {
				require.Contains(t, plan, "(kind = $1)", "%s %s:\n%s", name, mode, plan)
			}
		}
		_, err = conn.Exec(ctx, "DEALLOCATE "+name)
		require.NoError(t, err)
	}

	// AdvanceAll probes the same index once per pool.
	rows, err := conn.Query(ctx, "EXPLAIN "+checkpoint.SQLAdvanceAll)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "Index Scan using riverbus_job_unfinished_sequence on river_job", "advance all:\n%s", plan)
	require.Contains(t, plan, "(kind = p.name)", "advance all:\n%s", plan)
	require.NotContains(t, plan, "Seq Scan on river_job", "advance all:\n%s", plan)

	got, err := checkpoint.Advance(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(20_000), got)
	all, err := checkpoint.AdvanceAll(ctx, bundle.db)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"orders": 20_000}, all)
	h, err := checkpoint.GetHolder(ctx, bundle.db, "orders")
	require.NoError(t, err)
	require.Equal(t, int64(20_001), h.Sequence)
}

func argsAt(seq int64) workers.Args {
	a := workers.Args{}
	a.GlobalSequence = seq
	a.Type = "thing.happened"
	return a
}

// TestIndexExpressionMatchesMigration keeps the expression and predicate of
// Advance's query textually identical to the index in the migration.
func TestIndexExpressionMatchesMigration(t *testing.T) {
	t.Parallel()
	const (
		expr      = `(CASE WHEN args->>'global_sequence' ~ '^[0-9]{1,18}$' THEN (args->>'global_sequence')::bigint END)`
		predicate = `state NOT IN ('cancelled', 'completed', 'discarded')`
	)
	all, err := migrations.All()
	require.NoError(t, err)
	var index string
	for _, m := range all {
		if i := strings.Index(m.SQL, "CREATE INDEX riverbus_job_unfinished_sequence"); i >= 0 {
			index = m.SQL[i:]
			index = index[:strings.Index(index, ";")]
		}
	}
	require.NotEmpty(t, index, "index riverbus_job_unfinished_sequence not found in the migrations")
	require.Contains(t, index, expr)
	require.Contains(t, index, "WHERE "+predicate)
	for _, sql := range []string{checkpoint.SQLAdvance, checkpoint.SQLAdvanceAll} {
		require.Contains(t, sql, "min("+expr+")")
		require.Contains(t, sql, "WHERE kind = p.name AND "+predicate)
	}
}
