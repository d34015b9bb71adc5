package fanout_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pools"
)

// A plain pool whose cursor is at the horizon gets the jobs of the events
// a round passes in that round's own last round trip: when the round
// returns, they are inserted and the cursor has moved, with no batch of
// the pools' service.
func TestRoundCarriesBatchOfPoolAtHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{})
	toHorizonOnPlainPath(t, b, f)

	seq := appendEvent(t, b.db, "third")
	round, err := f.Services().Horizon.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, seq, round.Horizon)
	counts, _ := jobs(t, b.db, "plain")
	require.Equal(t, 1, counts[seq], "the round carried the plain pool's batch")
	p, err := pools.Get(ctx, b.db, "plain")
	require.NoError(t, err)
	require.Equal(t, seq, p.Cursor)
	counts, _ = jobs(t, b.db, "keyed")
	require.Zero(t, counts[seq], "an ordered pool is left to the pools' service")

	pass(t, f)
	counts, _ = jobs(t, b.db, "keyed")
	require.Equal(t, 1, counts[seq])
	counts, _ = jobs(t, b.db, "plain")
	require.Equal(t, 1, counts[seq], "one job, whoever inserted it")
}

// A pool whose row another instance holds is skipped by the round's ride,
// which neither fails the round nor moves the pool; its own batch takes it
// later.
func TestRoundRideSkipsLockedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	f := newFanout(t, b.db, fanout.Config{})
	toHorizonOnPlainPath(t, b, f)
	before, err := pools.Get(ctx, b.db, "plain")
	require.NoError(t, err)

	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // rolled back below
	_, err = tx.Exec(ctx, `SELECT 1 FROM riverbus_pool WHERE name = 'plain' FOR NO KEY UPDATE`)
	require.NoError(t, err)

	seq := appendEvent(t, b.db, "third")
	round, err := f.Services().Horizon.Round(ctx)
	require.NoError(t, err)
	require.Equal(t, seq, round.Horizon)
	p, err := pools.Get(ctx, b.db, "plain")
	require.NoError(t, err)
	require.Equal(t, before.Cursor, p.Cursor)
	counts, _ := jobs(t, b.db, "plain")
	require.Zero(t, counts[seq])

	require.NoError(t, tx.Rollback(ctx))
	pass(t, f)
	counts, _ = jobs(t, b.db, "plain")
	require.Equal(t, 1, counts[seq])
}

// toHorizonOnPlainPath brings pool "plain" to the horizon on the plain
// path: two passes over an event each, the general path's first look and
// then the plain path.
func toHorizonOnPlainPath(t *testing.T, b *testBundle, f *fanout.Fanout) {
	t.Helper()
	appendEvent(t, b.db, "first")
	pass(t, f)
	appendEvent(t, b.db, "second")
	pass(t, f)
	require.True(t, f.UsesPlainPath("plain"))
}
