package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
)

// The row trigger of migration 009 (a lane job back to work goes back in
// line) stays off the ordered hot path: the lane release, River's fetch and
// River's completer never call its function; a River-style retry does.
func TestLaneGuardOffTheHotPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "ord", Ordering: bustype.OrderingKey})
	require.NoError(t, err)
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET track_functions = 'pl'`)
	require.NoError(t, err)
	calls := func() int64 {
		t.Helper()
		_, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(
			(SELECT calls FROM pg_stat_user_functions WHERE funcname = 'riverbus_job_back_to_work'), 0)`).Scan(&n))
		return n
	}

	// 100 lanes with a pending job each.
	_, err = conn.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, state)
		SELECT jsonb_build_object('global_sequence', i), 'ord', 5, jsonb_build_object('riverbus_lane', 'k' || i), 1, 'ord', 'pending'
		FROM generate_series(1, 100) i`)
	require.NoError(t, err)
	var released int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT riverbus_release_lanes(array_agg(kind), array_agg(metadata->>'riverbus_lane'))
		FROM river_job`).Scan(&released))
	require.Equal(t, int64(100), released)
	// River's fetch and completer, as their statements change states.
	_, err = conn.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()`)
	require.NoError(t, err)
	require.Zero(t, calls())

	// River's JobRetry of ten completed jobs: each goes back in line and,
	// its lane being free, is released at once.
	_, err = conn.Exec(ctx, `UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = now() WHERE id <= 10`)
	require.NoError(t, err)
	require.Equal(t, int64(10), calls())
	var available int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id <= 10 AND state = 'available'`).Scan(&available))
	require.Equal(t, 10, available)
}
