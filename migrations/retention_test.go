package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/retention"
)

// Migration 015: a worker login applies the retention policy through the
// function, and may neither delete events itself, nor set the policy, nor
// move where the log begins; an application login may not even run the
// function or take the retention lock.
func TestRetentionRights(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	app := b.login(t, "riverbus_app")
	worker := b.login(t, "riverbus_worker")
	for range 10 { // a transaction each: retention deletes transactions whole
		_, err := b.owner.Exec(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('thing.happened', '{}')`)
		require.NoError(t, err)
	}
	_, err := b.owner.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 10`)
	require.NoError(t, err)
	_, _, err = pools.Create(ctx, b.owner, bustype.PoolParams{Name: "orders", From: bustype.FromSequence(6)})
	require.NoError(t, err)

	// No policy yet: the worker's pass deletes nothing.
	plan, err := retention.Trim(ctx, worker, nil)
	require.NoError(t, err)
	require.Equal(t, bustype.RetentionStopDisabled, plan.StoppedBy)

	requireDenied(t, worker,
		`DELETE FROM riverbus_event WHERE global_sequence = 1`,
		`UPDATE riverbus_retention SET enabled = true, keep = '0'`,
		`UPDATE riverbus_retention SET trimmed_through = 9`,
	)
	_, err = retention.SetPolicy(ctx, worker, true, 0)
	require.ErrorContains(t, err, "permission denied")
	_, err = retention.SetPolicy(ctx, b.owner, true, 0)
	require.NoError(t, err)

	// The worker applies it, as far as the pool lets it.
	plan, err = retention.Trim(ctx, worker, nil)
	require.NoError(t, err)
	require.Equal(t, int64(6), plan.Through, "%+v", plan)
	require.Equal(t, int64(6), plan.Events)
	// A worker resets pools, which takes the retention lock.
	p, err := pools.Reset(ctx, worker, "orders", 0)
	require.NoError(t, err)
	require.Equal(t, int64(6), p.Cursor)

	requireDenied(t, app,
		`SELECT * FROM riverbus_retention_step(0, NULL, NULL, 10, true)`,
		`SELECT * FROM riverbus_retention`,
	)
	var private string
	require.NoError(t, b.owner.QueryRow(ctx, `SELECT riverbus_private_schema()`).Scan(&private))
	for _, mode := range []string{"SHARE ROW EXCLUSIVE", "ROW EXCLUSIVE"} {
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{private, "riverbus_retention_lock"}.Sanitize()+" IN "+mode+" MODE")
			return err
		})
		require.Equal(t, pgerrcode.InsufficientPrivilege, database.Code(err), "%s: %v", mode, err)
	}
}
