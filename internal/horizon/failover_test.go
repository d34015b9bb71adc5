package horizon_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/horizon"
)

// The fence on a server whose timeline is not the horizon's (faked here:
// TestFailoverNeverReusesDeliveredNumbers runs a real promotion) waits for
// the appenders in flight, names them when they outlast its wait, then
// moves every event above the horizon, in order, past 2^32 more numbers,
// passes the emptied range, and runs once.
func TestFenceRenumbersAboveTheHorizonAfterAppendersEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var first, second int64
	require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('t', '{}') RETURNING global_sequence`).Scan(&first))
	require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('t', '{}') RETURNING global_sequence`).Scan(&second))
	f, err := horizon.Fence(ctx, b.db)
	require.NoError(t, err)
	require.Nil(t, f, "the server the horizon was recorded on: nothing to fence")

	_, err = b.db.Exec(ctx, `UPDATE riverbus_horizon SET timeline = timeline + 100`)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE river_job SET priority = 1 WHERE id = 0`)
	require.ErrorContains(t, err, "has not fenced yet", "job writes wait for the fence")

	writer, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx) //nolint:errcheck
	var third int64
	require.NoError(t, writer.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('t', '{}') RETURNING global_sequence`).Scan(&third))
	_, err = horizon.Fence(ctx, b.db)
	require.ErrorContains(t, err, "did not end within 2s")
	require.ErrorContains(t, err, "pid ")
	require.NoError(t, writer.Commit(ctx))

	f, err = horizon.Fence(ctx, b.db)
	require.NoError(t, err)
	require.NotNil(t, f)
	require.Equal(t, int64(0), f.HorizonBefore)
	require.Equal(t, third+1<<32, f.HorizonAfter)
	require.Equal(t, int64(3), f.EventsRenumbered)
	require.Equal(t, f.NewTimeline+100, f.OldTimeline, "the faked timeline is recorded as the old one")
	// In their old order: the transaction ids were taken in that order too.
	rows, err := b.db.Query(ctx, `SELECT global_sequence FROM riverbus_event ORDER BY transaction_id`)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{f.HorizonAfter + 1, f.HorizonAfter + 2, f.HorizonAfter + 3}, seqs)
	var next int64
	require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('t', '{}') RETURNING global_sequence`).Scan(&next))
	require.Equal(t, f.HorizonAfter+4, next, "the sequence goes on above the renumbered events")

	again, err := horizon.Fence(ctx, b.db)
	require.NoError(t, err)
	require.Nil(t, again, "fenced once")
	st, err := horizon.Get(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, f.HorizonAfter, st.Horizon)
	require.Equal(t, int64(1), st.Failovers)
	require.Equal(t, f.ID, st.LastFailover.ID)
}
