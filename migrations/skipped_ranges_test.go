package migrations_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/migrations"
)

// Migration 006 turns the per-sequence rows of riverbus_skipped into ranges
// (consecutive sequences with one bound) and keeps the late ones in
// riverbus_late, with the pools' records of them.
func TestSkippedRowsBecomeRanges(t *testing.T) {
	t.Parallel()
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
	for _, m := range all {
		if m.Version >= 6 {
			break
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO riverbus_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		}), m.Name)
	}
	// 5, 6 and 8 skipped with bound 10, 7 late, 9 with another bound, 20
	// alone; a pool handled 7.
	_, err = pool.Exec(ctx, `
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
