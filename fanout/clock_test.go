package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
)

// A test clock moves a gap's age as the database's clock would: a gap first
// seen after the clock moved starts at age zero, and it passes the gap
// timeout only once the clock has moved that much more. Without a shift
// the round measures by the database's clock alone.
func TestAgeShiftMovesGapAgesLikeTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	round := func(shift time.Duration) fanout.RoundResult {
		t.Helper()
		res, err := fanout.Advance(ctx, b.db, fanout.RoundParams{GapTimeout: time.Hour, PageSize: 100, AgeShift: shift})
		require.NoError(t, err)
		require.True(t, res.Locked)
		return res
	}

	_, held := openWriter(t, b.db)
	after := appendEvent(t, b.db, "t")
	// The clock is a day ahead already when the gap is first seen.
	res := round(24 * time.Hour)
	require.True(t, res.Holding, "the gap is recorded")
	require.Equal(t, held-1, res.Horizon)
	res = round(24*time.Hour + 59*time.Minute)
	require.True(t, res.Holding, "59 minutes old: held")
	require.Zero(t, res.Skipped)
	res = round(0)
	require.True(t, res.Holding, "the database's clock alone: held")
	res = round(25 * time.Hour)
	require.Equal(t, after, res.Horizon, "an hour old: skipped by the gap timeout")
	require.Equal(t, int64(1), res.Skipped)
}
