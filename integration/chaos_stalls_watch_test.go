package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// The chaos run's lock-wait watch names a session waiting for a lock the
// neighbour's login holds, and only such a session: one waiting for
// another login's lock is not the neighbour's doing.
func TestNeighbourWaitersNamesOnlyTheNeighboursVictims(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewPool(t)
	neighbour := pgtest.Login(t, db, "riverbus_app")
	var role string
	require.NoError(t, neighbour.QueryRow(ctx, `SELECT current_user`).Scan(&role))

	holder, err := neighbour.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock(7101)`)
	require.NoError(t, err)
	other, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()
	_, err = other.Exec(ctx, `SELECT pg_advisory_lock(7102)`)
	require.NoError(t, err)

	victim := func(key int) {
		go func() {
			_, _ = db.Exec(ctx, `SELECT /* victim */ pg_advisory_xact_lock($1::bigint)`, key)
		}()
	}
	victim(7101)
	victim(7102)
	var waiters []string
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid IN (7101, 7102)`).Scan(&n)
		if err != nil || n < 2 {
			return false
		}
		rows, err := db.Query(ctx, sqlNeighbourWaiters, role)
		if err != nil {
			return false
		}
		waiters, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Len(t, waiters, 1, "only the wait on the neighbour's key: %v", waiters)
	require.Contains(t, waiters[0], "/* victim */")

	// Let the victims go before the pools close.
	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	require.NoError(t, err)
}
