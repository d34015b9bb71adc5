package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pools"
)

// A pool whose cursor was moved above the end of the log (by SQL, or by a
// reset made before resets refused it) reports how far, so an alert fires
// while the events that get the numbers in between are skipped.
func TestCollectorPoolAheadOfLog(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	for _, name := range []string{"typo", "fine"} {
		_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: name})
		require.NoError(t, err)
	}
	for range 3 {
		_, err := bundle.db.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', 'k', '{}')`)
		require.NoError(t, err)
	}
	_, err := bundle.db.Exec(ctx, `UPDATE riverbus_pool SET cursor_seq = 1000 WHERE name = 'typo'`)
	require.NoError(t, err)

	s := scrape(t, serve(t, bundle))
	require.Equal(t, "997", s[`riverbus_pool_ahead_of_log{pool="typo"}`])
	require.Equal(t, "0", s[`riverbus_pool_ahead_of_log{pool="fine"}`])
	require.Equal(t, "0", s[`riverbus_pool_lag{pool="typo"}`], "the lag alone hides it")
}
