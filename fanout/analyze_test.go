package fanout_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
)

// A pool catching up grows river_job faster than autovacuum analyzes it;
// the pools' service analyzes it once the jobs it inserted reach the
// threshold, so River's producers drop the fetch plan chosen for the
// small table (a sequential scan) for one on the fetch index.
func TestCatchUpAnalyzesJobTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const events, threshold = 30, 20
	for range events {
		appendEvent(t, b.db, "t")
	}
	createPool(t, b.db, bustype.PoolParams{Name: "rebuild", From: bustype.FromBeginning})
	reltuples := func() float64 {
		var n float64
		require.NoError(t, b.db.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'river_job'::regclass`).Scan(&n))
		return n
	}
	require.Less(t, reltuples(), float64(threshold), "river_job analyzed before the fan-out ran")

	f := newFanout(t, b.db, fanout.Config{BatchSize: 10})
	s := fanouttest.InitSignals(t, f)
	s.Pools.SetAnalyzeJobsMin(threshold)
	runFanout(t, f)

	s.Pools.TestSignals.Analyzed.WaitOrTimeout()
	// The ANALYZE began after at least threshold jobs had committed.
	require.GreaterOrEqual(t, reltuples(), float64(threshold))
}
