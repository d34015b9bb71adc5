package riverbus_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// okWorker completes every job.
type okWorker struct {
	river.WorkerDefaults[billingArgs]
}

func (okWorker) Work(context.Context, *river.Job[billingArgs]) error { return nil }

// With completions failing, Status names the failing operation, the
// process, how often and since when; the pool whose jobs stay running
// beyond its workers is flagged; and a process whose own reports fail is
// called stale, not left out. Status used to show nothing but running
// jobs.
func TestStatusShowsFailingOperations(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = admin.PoolCreate(ctx, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	jobtest.FailLikeDiskFull(t, b.db, "test_disk_full", "river_job", jobtest.CompletionsOf("billing"))

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ws := workers.NewRegistry()
	workers.Add(ws, okWorker{}, &workers.AddOpts{MaxWorkers: 2})
	// Reports every second: stale after three missed ones, which a loaded
	// machine does not make it miss (at 100 ms, one late report did).
	riverbustest.StartClient(t, b.db, &riverbus.Config{Workers: ws, ReportInterval: time.Second,
		ProcessName: "billing workers", Logger: quiet, Work: workers.Config{Logger: quiet}})
	for range 30 {
		_, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}

	var st *riverbus.Status
	var failing *riverbus.StatusError
	testwait.Eventually(t, 60*time.Second, func() bool {
		st, err = admin.Status(ctx)
		require.NoError(t, err)
		for _, p := range st.Processes {
			for i, e := range p.Errors {
				if p.Name == "billing workers" && e.Operation == "River complete" {
					failing = &p.Errors[i]
				}
			}
		}
		return failing != nil
	}, "Status does not show the failing completions")
	proc := st.Processes[0]
	require.Len(t, st.Processes, 1)
	require.False(t, proc.Stale)
	require.True(t, proc.Fanout)
	require.Equal(t, map[string]int{"billing": 2}, proc.Queues)
	require.Positive(t, failing.Count)
	require.False(t, failing.Since.IsZero())
	require.False(t, failing.LastAt.Before(failing.Since))
	require.Contains(t, failing.LastError, "No space left on device")
	require.True(t, st.Troubled())
	require.NotEmpty(t, st.ErrorsFor(st.Pool("billing")))
	out, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(out), `"operation":"River complete"`)

	// River keeps fetching while nothing completes: more jobs run than the
	// 2 slots hold. Once they have run for over checkpoint.StuckAfter (aged
	// here as a minute of this would), the pool is flagged.
	testwait.Eventually(t, 30*time.Second, func() bool {
		st, err = admin.Status(ctx)
		require.NoError(t, err)
		return st.Pool("billing").Jobs[bustype.JobStateRunning] > 4
	}, "the workers fetched no more than their slots")
	require.Zero(t, st.Pool("billing").RunningAboveWorkers, "jobs that just started are not flagged")
	_, err = b.db.Exec(ctx, `UPDATE river_job SET attempted_at = attempted_at - interval '90 seconds' WHERE kind = 'billing' AND state = 'running'`)
	require.NoError(t, err)
	st, err = admin.Status(ctx)
	require.NoError(t, err)
	pool := st.Pool("billing")
	require.Equal(t, int64(2), pool.WorkerSlots)
	require.Greater(t, pool.RunningStuck, int64(4))
	require.Equal(t, pool.RunningStuck-2, pool.RunningAboveWorkers)

	// A second process whose reports the database refuses: Status calls it
	// stale instead of dropping it, and the process counts the failures in
	// its own metric, which needs no database.
	jobtest.FailLikeDiskFull(t, b.db, "test_report_disk_full", "riverbus_process", "OLD.name = 'fan-out on a full disk'")
	before := testutil.ToFloat64(health.ErrorsTotal.WithLabelValues(health.OpReport, ""))
	riverbustest.StartClient(t, b.db, &riverbus.Config{ReportInterval: 100 * time.Millisecond, ProcessName: "fan-out on a full disk", Logger: quiet})
	testwait.Eventually(t, 30*time.Second, func() bool {
		st, err = admin.Status(ctx)
		require.NoError(t, err)
		for _, p := range st.Processes {
			if p.Name == "fan-out on a full disk" {
				return p.Stale && p.ReportAgeSeconds > float64(riverbus.StaleReports)*p.ReportIntervalSeconds
			}
		}
		return false
	}, "Status does not call the process whose reports fail stale")
	require.Greater(t, testutil.ToFloat64(health.ErrorsTotal.WithLabelValues(health.OpReport, "")), before)
	for _, p := range st.Processes {
		if p.Name == "billing workers" {
			require.False(t, p.Stale, "a process that reports is not stale")
		}
	}
}
