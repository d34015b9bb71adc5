package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/migrations"
)

// Migration 006 turns the per-sequence rows of riverbus_skipped into ranges
// (consecutive sequences with one bound) and keeps the late ones in
// riverbus_late, with the pools' records of them.
func TestSkippedRowsBecomeRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migratedBelow(t, 6)
	// 5, 6 and 8 skipped with bound 10, 7 late, 9 with another bound, 20
	// alone; a pool handled 7.
	_, err := pool.Exec(ctx, `
INSERT INTO riverbus_skipped (sequence, xid_bound, late_at) VALUES
	(5, '10', NULL), (6, '10', NULL), (7, '10', now()), (8, '10', NULL), (9, '11', NULL), (10, '10', NULL), (20, '10', NULL);
INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ('pa', 0, 20);
INSERT INTO riverbus_pool_late (pool, sequence) VALUES ('pa', 7)`)
	require.NoError(t, err)

	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT first_sequence, last_sequence, xid_bound::text FROM riverbus_skipped ORDER BY 1`)
	require.NoError(t, err)
	type r struct {
		First, Last int64
		Bound       string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[r])
	require.NoError(t, err)
	require.Equal(t, []r{{5, 6, "10"}, {8, 8, "10"}, {9, 9, "11"}, {10, 10, "10"}, {20, 20, "10"}}, got)
	var late, handled int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT sequence FROM riverbus_late), (SELECT sequence FROM riverbus_pool_late)`).Scan(&late, &handled))
	require.Equal(t, int64(7), late)
	require.Equal(t, int64(7), handled)
}
