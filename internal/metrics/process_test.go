package metrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/pools"
)

// What the processes report reaches the metrics of any process: a pool's
// batch failing in one of them, and a pool whose jobs stay running beyond
// the slots its workers report. The failing process counts its failures
// in its own riverbus_process_errors_total too, without the database.
func TestCollectorProcessReports(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)

	rec := health.NewRecorder()
	for range 3 {
		rec.Record(health.OpPoolBatch, "billing", "insert pool jobs: ERROR: could not extend file: No space left on device (SQLSTATE 53100)")
	}
	rep := health.NewReporter(bundle.db, rec, &health.ReporterConfig{Name: "worker", Queues: map[string]int{"billing": 1}, Interval: time.Hour, Logger: bundle.logger})
	require.NoError(t, rep.Report(ctx))

	// Three jobs River shows running for two minutes, where the one
	// reporting worker has one slot.
	_, err = bundle.db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, scheduled_at)
		SELECT '{}', 'billing', 25, 'billing', 'running', 1, now() - interval '2 minutes', now() - interval '2 minutes' FROM generate_series(1, 3)`)
	require.NoError(t, err)

	s := scrape(t, serve(t, bundle))
	require.Equal(t, "3", s[`riverbus_recent_errors{operation="pool batch",subject="billing"}`], "%v", s)
	require.Contains(t, s, `riverbus_recent_error_age_seconds{operation="pool batch",subject="billing"}`)
	require.Equal(t, "1", s[`riverbus_processes{state="live"}`])
	require.Equal(t, "0", s[`riverbus_processes{state="stale"}`])
	require.Equal(t, "1", s[`riverbus_pool_worker_slots{pool="billing"}`])
	require.Equal(t, "2", s[`riverbus_pool_running_above_workers{pool="billing"}`])
	require.NotEqual(t, "", s[`riverbus_process_errors_total{operation="pool batch",subject="billing"}`], "the process's own count")

	// A stopped process takes its report with it.
	rep.Remove()
	s = scrape(t, serve(t, bundle))
	require.Equal(t, "0", s[`riverbus_processes{state="live"}`])
	require.NotContains(t, s, `riverbus_recent_errors{operation="pool batch",subject="billing"}`)
	require.Equal(t, "0", s[`riverbus_pool_worker_slots{pool="billing"}`])
	require.Equal(t, "3", s[`riverbus_pool_running_above_workers{pool="billing"}`], "no worker holds them at all")
}
