package fanout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
	hz "github.com/riverbus/riverbus/internal/horizon"
)

// fastRound runs one round as the horizon service does: fast first.
func fastRound(t *testing.T, b *testBundle) fanout.RoundResult {
	t.Helper()
	res, err := fanout.Advance(context.Background(), b.db, fanout.RoundParams{GapTimeout: time.Hour, PageSize: 100, Fast: true})
	require.NoError(t, err)
	return res
}

// The fast round passes the committed run above the horizon in its one
// round trip; a hole above it is left to the full round, which records
// it as a gap (and holds) in the same call; once the hole's writer
// commits, the fast round passes it and drops the gap row.
func TestFastRoundPassesTheCommittedRunAndLeavesHolesToTheFullRound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s1 := appendEvent(t, b.db, "t")
	s2 := appendEvent(t, b.db, "t")
	writer, held := openWriter(t, b.db)
	s4 := appendEvent(t, b.db, "t")
	require.Equal(t, []int64{s1 + 1, s2 + 1, held + 1}, []int64{s2, held, s4})

	res := fastRound(t, b)
	require.True(t, res.Locked)
	require.True(t, res.Moved)
	require.Equal(t, s2, res.Horizon)
	require.True(t, res.Holding, "the hole of the open writer holds the horizon")
	require.EqualValues(t, 1, count(t, b.db, `SELECT count(*) FROM riverbus_gap WHERE first_sequence = $1 AND last_sequence = $1`, held),
		"the full round recorded the hole as a gap")
	require.Equal(t, s2, horizon(t, b.db).Horizon)

	// Nothing new: the round holds, moves nothing, and keeps the gap.
	res = fastRound(t, b)
	require.False(t, res.Moved)
	require.True(t, res.Holding)

	require.NoError(t, writer.Commit(ctx))
	res = fastRound(t, b)
	require.True(t, res.Moved)
	require.False(t, res.Holding)
	require.Equal(t, s4, res.Horizon)
	require.Equal(t, s4, horizon(t, b.db).Horizon)
	require.Zero(t, count(t, b.db, `SELECT count(*) FROM riverbus_gap`), "the passed gap row is gone")
}

// The fast move keeps the full round's rules: without the round's lock it
// moves nothing, and with the sequence below the horizon (the horizon
// frozen) it passes nothing either, however many committed events lie
// above the horizon.
func TestFastRoundNeedsTheLockAndAnUnfrozenHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var seqs []int64
	for range 5 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}

	// Another instance's round holds the lock.
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var locked bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT riverbus_horizon_try_lock()`).Scan(&locked))
	require.True(t, locked)
	res := fastRound(t, b)
	require.False(t, res.Locked)
	require.Zero(t, horizon(t, b.db).Horizon, "a round without the lock moved the horizon")
	require.NoError(t, tx.Rollback(ctx))

	// The horizon at the third event, and the sequence set back below it.
	_, err = b.db.Exec(ctx, `UPDATE riverbus_horizon SET horizon = $1`, seqs[2])
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `SELECT setval('riverbus_event_global_sequence', $1)`, seqs[0])
	require.NoError(t, err)
	res = fastRound(t, b)
	require.True(t, res.Locked)
	require.False(t, res.Moved)
	require.Equal(t, seqs[2], horizon(t, b.db).Horizon, "a frozen horizon moved")
	require.Equal(t, hz.ProblemSequenceBelowHorizon, res.Problems[0].Code)

	// Repaired, the fast round passes the rest.
	_, err = b.db.Exec(ctx, `SELECT setval('riverbus_event_global_sequence', $1)`, seqs[4])
	require.NoError(t, err)
	res = fastRound(t, b)
	require.True(t, res.Moved)
	require.Equal(t, seqs[4], horizon(t, b.db).Horizon)
}
