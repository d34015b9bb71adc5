package fanout

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWalk(t *testing.T) {
	t.Parallel()
	snap := snapshot{xmax: 200, xip: []uint64{150, 180}}

	t.Run("ContiguousMovesUp", func(t *testing.T) {
		t.Parallel()
		res := walk(walkInput{horizon: 3, snap: snap, visible: []int64{4, 5, 6}})
		require.Equal(t, int64(6), res.horizon)
		require.Empty(t, res.newGaps)
		require.False(t, res.holding)
	})

	t.Run("NewGapIsRecordedAndHeld", func(t *testing.T) {
		t.Parallel()
		res := walk(walkInput{horizon: 3, snap: snap, visible: []int64{4, 7, 8}, gapTimeout: time.Second})
		require.Equal(t, int64(4), res.horizon)
		require.Equal(t, []gapRow{{first: 5, last: 6}}, res.newGaps)
		require.True(t, res.holding)
	})

	t.Run("NothingAboveIsNoGap", func(t *testing.T) {
		t.Parallel()
		res := walk(walkInput{horizon: 3, snap: snap})
		require.Equal(t, int64(3), res.horizon)
		require.Empty(t, res.newGaps)
		require.False(t, res.holding)
	})

	t.Run("ProvenDeadWhenNoRunningXidBelowBound", func(t *testing.T) {
		t.Parallel()
		// Bound 150: xip has 150 and 180, none below 150.
		res := walk(walkInput{horizon: 4, snap: snap, visible: []int64{7, 8},
			gaps: []gapRow{{first: 5, last: 6, bound: 150}}, gapTimeout: time.Hour})
		require.Equal(t, int64(8), res.horizon)
		require.Equal(t, int64(2), res.provenDead)
		require.Equal(t, []int64{5}, res.deadGaps)
		require.Empty(t, res.skip)
	})

	t.Run("HeldWhileAnOlderXidRuns", func(t *testing.T) {
		t.Parallel()
		res := walk(walkInput{horizon: 4, snap: snap, visible: []int64{7, 8},
			gaps: []gapRow{{first: 5, last: 6, bound: 151, age: time.Second}}, gapTimeout: time.Hour})
		require.Equal(t, int64(4), res.horizon)
		require.True(t, res.holding)
		require.Empty(t, res.deadGaps)
	})

	// The case a snapshot-xmax bound gets wrong: the writer's xid is at or
	// above the snapshot's xmax, so it is in no xip. The bound must be the
	// round's own xid, assigned later, which is above it; a bound at or
	// above xmax never proves anything.
	t.Run("BoundAtOrAboveXmaxProvesNothing", func(t *testing.T) {
		t.Parallel()
		res := walk(walkInput{horizon: 4, snap: snapshot{xmax: 200}, visible: []int64{6},
			gaps: []gapRow{{first: 5, last: 5, bound: 200}}, gapTimeout: time.Hour})
		require.True(t, res.holding)
		require.Equal(t, int64(4), res.horizon)
	})

	t.Run("TimedOutGapIsSkippedNotDropped", func(t *testing.T) {
		t.Parallel()
		// Sequence 6 of the run committed meanwhile; only 5 and 7 are
		// missing. The run is skipped as a whole (the statement that records
		// it splits it around 6).
		res := walk(walkInput{horizon: 4, snap: snap, visible: []int64{6, 8},
			gaps: []gapRow{{first: 5, last: 7, bound: 170, age: 2 * time.Second}}, gapTimeout: time.Second})
		require.Equal(t, int64(8), res.horizon)
		require.Equal(t, []gapRow{{first: 5, last: 7, bound: 170}}, res.skip)
		require.Equal(t, int64(2), res.skipped)
		require.Zero(t, res.provenDead)
	})

	// A jump of 10^15 is one gap: passed in one step, counted without a
	// loop over its numbers.
	t.Run("HugeGapIsOneStep", func(t *testing.T) {
		t.Parallel()
		const jump = int64(1e15)
		res := walk(walkInput{horizon: 4, snap: snap, visible: []int64{jump},
			gaps: []gapRow{{first: 5, last: jump - 1, bound: 140}}, gapTimeout: time.Hour})
		require.Equal(t, jump, res.horizon)
		require.Equal(t, jump-5, res.provenDead)
		res = walk(walkInput{horizon: 4, snap: snap, visible: []int64{jump},
			gaps: []gapRow{{first: 5, last: jump - 1, bound: 190, age: 2 * time.Hour}}, gapTimeout: time.Hour})
		require.Equal(t, jump, res.horizon)
		require.Equal(t, []gapRow{{first: 5, last: jump - 1, bound: 190}}, res.skip)
		require.Equal(t, jump-5, res.skipped)
	})

	// A broken assumption: no proof, no timeout, no forgetting; contiguous
	// sequences still pass. The sequence below the horizon: nothing moves.
	t.Run("BrokenAssumptionsHold", func(t *testing.T) {
		t.Parallel()
		in := walkInput{horizon: 4, snap: snap, visible: []int64{5, 7},
			gaps:       []gapRow{{first: 6, last: 6, bound: 140, age: 2 * time.Hour}},
			skipped:    []skippedRange{{first: 1, last: 2, bound: 140, newLate: true}},
			gapTimeout: time.Hour, noProof: true}
		res := walk(in)
		require.Equal(t, int64(5), res.horizon)
		require.True(t, res.holding)
		require.Empty(t, res.skip)
		require.Zero(t, res.provenDead)
		require.Empty(t, res.forgotten)
		require.Equal(t, []int64{1}, res.late, "a committed event in a range is late whatever the sequence does")
		in.frozen = true
		res = walk(in)
		require.Equal(t, int64(4), res.horizon)
	})

	t.Run("RunLongerThanRecordedGapGetsNewGap", func(t *testing.T) {
		t.Parallel()
		// Gap 5..5 recorded earlier and now proven; 6 was handed out later
		// and is missing too: it needs its own bound.
		res := walk(walkInput{horizon: 4, snap: snap, visible: []int64{7},
			gaps: []gapRow{{first: 5, last: 5, bound: 140}}, gapTimeout: time.Hour})
		require.Equal(t, int64(5), res.horizon)
		require.Equal(t, []gapRow{{first: 6, last: 6}}, res.newGaps)
	})

	t.Run("EveryNewRunRecordedAtOnce", func(t *testing.T) {
		t.Parallel()
		// 5 is held by a known gap; 7 and 9-10 are new runs.
		res := walk(walkInput{horizon: 4, snap: snap, visible: []int64{6, 8, 11},
			gaps: []gapRow{{first: 5, last: 5, bound: 190, age: time.Millisecond}}, gapTimeout: time.Hour})
		require.Equal(t, int64(4), res.horizon)
		require.True(t, res.holding)
		require.Equal(t, []gapRow{{first: 7, last: 7}, {first: 9, last: 10}}, res.newGaps)
	})

	t.Run("SkippedRanges", func(t *testing.T) {
		t.Parallel()
		res := walk(walkInput{horizon: 10, snap: snap, skipped: []skippedRange{
			{first: 1, last: 3, bound: 170, newLate: true},   // an event committed late, writer may run
			{first: 4, last: 4, bound: 140},                  // writer gone: forgotten
			{first: 5, last: 9, bound: 190},                  // writer may still run
			{first: 10, last: 10, bound: 140, newLate: true}, // late, and proven: both
		}})
		require.Equal(t, []int64{1, 10}, res.late)
		require.Equal(t, []int64{4, 10}, res.forgotten)
	})
}
