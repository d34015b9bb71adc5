package integration_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
)

// A writer that uses two-phase commit: its prepared transaction holds a
// sequence while later events commit. The horizon holds at that gap (the
// gap timeout is an hour), also across a PostgreSQL restart, which the
// prepared transaction survives; COMMIT PREPARED delivers the event, and
// after ROLLBACK PREPARED the gap is proven dead, not skipped by the
// timeout. A prepared transaction that appended nothing holds no gap, before
// and after the restart: the gap proof tells the two apart in pg_locks,
// where a prepared transaction's locks belong to virtual transaction -1/xid.
func TestPreparedWriterGap(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a PostgreSQL server")
	}
	t.Parallel()
	ctx := context.Background()
	srv, dbURL := pgtest.NewServer(t)
	db := pgtest.Connect(t, dbURL)
	const pool = "prepared"
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: pool})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `CREATE TABLE unrelated (id int)`)
	require.NoError(t, err)
	f, err := fanout.New(db, &fanout.Config{GapTimeout: time.Hour, Logger: discardLogger()})
	require.NoError(t, err)

	// prepare runs f in a transaction with riverbus.notify off and
	// prepares it as gid.
	prepare := func(gid string, f func(tx pgx.Tx)) {
		t.Helper()
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, outbox.SkipNotifyTx(ctx, tx))
		f(tx)
		_, err = tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
		require.NoError(t, err)
	}
	prepareAppend := func(gid string) int64 {
		t.Helper()
		var seq int64
		prepare(gid, func(tx pgx.Tx) {
			res, err := outbox.AppendTx(ctx, tx, outbox.Event{Type: "prepared", Data: json.RawMessage(`{}`)})
			require.NoError(t, err)
			seq = res[0].GlobalSequence
		})
		return seq
	}
	appendOne := func() int64 {
		t.Helper()
		res, err := outbox.Append(ctx, db, outbox.Event{Type: "plain", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		return res[0].GlobalSequence
	}
	// rolledBackGap leaves a rolled-back sequence below a committed one and
	// returns both.
	rolledBackGap := func() (gap, later int64) {
		t.Helper()
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		res, err := outbox.AppendTx(ctx, tx, outbox.Event{Type: "rolled-back", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		return res[0].GlobalSequence, appendOne()
	}
	horizonNow := func() *horizon.Status {
		t.Helper()
		h, err := horizon.Get(ctx, db)
		require.NoError(t, err)
		return h
	}
	// passUntil runs fan-out passes until cond holds (a restart leaves dead
	// connections in the pool: a failed pass is tried again).
	passUntil := func(what string, cond func(h *horizon.Status) bool) {
		t.Helper()
		testwait.Eventually(t, 60*time.Second, func() bool {
			if _, err := f.Pass(ctx); err != nil {
				return false
			}
			h, err := horizon.Get(ctx, db)
			return err == nil && cond(h)
		}, "%s", what)
	}
	// holds checks that a few passes leave the horizon at below.
	holds := func(below int64) {
		t.Helper()
		for range 5 {
			_, err := f.Pass(ctx)
			require.NoError(t, err)
		}
		require.Equal(t, below-1, horizonNow().Horizon, "the horizon holds at the prepared transaction's sequence")
	}
	finish := func(sql string) {
		t.Helper()
		testwait.Eventually(t, 30*time.Second, func() bool {
			_, err := db.Exec(ctx, sql)
			return err == nil
		}, "%s", sql)
	}

	// A prepared transaction that appended nothing.
	prepare("rb-unrelated", func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `INSERT INTO unrelated VALUES (1)`)
		require.NoError(t, err)
	})
	gap, later := rolledBackGap()
	passUntil("a rolled-back gap passed beside an unrelated prepared transaction", func(h *horizon.Status) bool {
		return h.Horizon >= later
	})
	require.Zero(t, horizonNow().GapsSkipped, "proven dead, not skipped")

	g := prepareAppend("rb-commit")
	after := appendOne()
	require.Greater(t, g, gap)
	holds(g)
	require.Empty(t, jobsOf(t, db, pool, g, after))

	require.NoError(t, srv.Restart(ctx))
	t.Log("PostgreSQL restarted")
	var prepared int
	testwait.Eventually(t, 30*time.Second, func() bool {
		return db.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_xacts`).Scan(&prepared) == nil
	}, "read pg_prepared_xacts")
	require.Equal(t, 2, prepared, "both prepared transactions survived the restart")
	passUntil("a pass after the restart", func(*horizon.Status) bool { return true })
	holds(g)
	require.Empty(t, jobsOf(t, db, pool, g, after))

	// The unrelated prepared transaction still holds no gap.
	gap, later = rolledBackGap()
	require.Greater(t, gap, after)
	finish(`COMMIT PREPARED 'rb-commit'`)
	passUntil("the committed prepared event and those after it delivered", func(h *horizon.Status) bool {
		return h.Horizon >= later
	})
	require.Equal(t, map[int64]int{g: 1, after: 1}, jobsOf(t, db, pool, g, after))
	require.Empty(t, jobsOf(t, db, pool, gap))
	h := horizonNow()
	require.Zero(t, h.GapsSkipped, "nothing waited for the gap timeout")
	require.Zero(t, h.LateEvents)

	g = prepareAppend("rb-rollback")
	after = appendOne()
	holds(g)
	finish(`ROLLBACK PREPARED 'rb-rollback'`)
	passUntil("the rolled-back prepared sequence proven dead", func(h *horizon.Status) bool {
		return h.Horizon >= after
	})
	require.Zero(t, horizonNow().GapsSkipped, "proven dead, not skipped by the timeout")
	require.Equal(t, map[int64]int{after: 1}, jobsOf(t, db, pool, g, after))

	finish(`ROLLBACK PREPARED 'rb-unrelated'`)
}

// jobsOf returns, for the given sequences, the number of jobs of pool.
func jobsOf(t *testing.T, db *pgxpool.Pool, pool string, seqs ...int64) map[int64]int {
	t.Helper()
	all := jobCounts(t, db, pool)
	out := map[int64]int{}
	for _, s := range seqs {
		if n := all[s]; n > 0 {
			out[s] = n
		}
	}
	return out
}
