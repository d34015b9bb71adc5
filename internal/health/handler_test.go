package health

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The handler records what riverbus's services mark and what River's
// services log as failures, passes every record on as the operator's
// level allows, and records a failure even when that level hides it.
func TestHandlerRecordsFailures(t *testing.T) {
	var out bytes.Buffer
	rec := NewRecorder()
	inner := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelError})
	ours := slog.New(NewHandler(inner, rec, false))
	river := slog.New(NewHandler(inner, rec, true))

	ours.Warn("fan-out of pool failed; retrying it", Operation(OpPoolBatch), "pool", "billing", "error", "insert pool jobs: boom")
	ours.With(Operation(OpHorizonRound)).Error("horizon round failed", "error", "connection refused")
	ours.Warn("a warning that is no failure")
	ours.WithGroup("g").Error("grouped", Operation("hidden"))
	river.Error("jobcompleter.BatchCompleter: Completer error (will retry after sleep)", "err", "No space left on device")
	river.Error("producer: Error fetching jobs", slog.String("err", "timeout"), slog.String("queue", "billing"))
	river.Warn("jobexecutor.JobExecutor: job cancelled remotely")
	river.Error("maintenance.JobRescuer: Error rescuing jobs", "error", "disk full")
	river.Error("jobexecutor.JobExecutor: Failed to report error for job", "error", "handler failed")
	river.Info("jobexecutor.JobExecutor: Job errored; retrying", "error", "a handler's error is the job's, not the process's")

	got := map[Key]string{}
	for _, f := range rec.Recent() {
		got[f.Key] = f.Message
	}
	require.Equal(t, map[Key]string{
		{OpPoolBatch, "billing"}:  "insert pool jobs: boom",
		{OpHorizonRound, ""}:      "connection refused",
		{OpRiverComplete, ""}:     "jobexecutor.JobExecutor: Failed to report error for job",
		{OpRiverFetch, "billing"}: "timeout",
		{"River JobRescuer", ""}:  "disk full",
	}, got)
	require.NotContains(t, out.String(), "fan-out of pool failed", "the operator's level hides warnings")
	require.Contains(t, out.String(), "horizon round failed")
}

// A run of failures counts on while they come within RecentWindow of each
// other; after a quiet RecentWindow it is over, and the next failure
// starts a new run.
func TestRecorderRuns(t *testing.T) {
	rec := NewRecorder()
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	rec.now = func() time.Time { return now }
	rec.Record(OpRetention, "", "postgres://user:secret@db/x refused")
	now = now.Add(time.Minute)
	rec.Record(OpRetention, "", "again")
	f := rec.Recent()
	require.Len(t, f, 1)
	require.Equal(t, int64(2), f[0].Count)
	require.Equal(t, now.Add(-time.Minute), f[0].Since)

	now = now.Add(RecentWindow + time.Second)
	require.Empty(t, rec.Recent(), "the run is over")
	rec.Record(OpRetention, "", "later")
	f = rec.Recent()
	require.Equal(t, int64(1), f[0].Count)
	require.Equal(t, now, f[0].Since)
}

// Credentials in a failure's message are masked before anything keeps it.
func TestRecorderMasksURLs(t *testing.T) {
	rec := NewRecorder()
	rec.Record(OpListen, "", `dial postgres://riverbus:hunter2@db.internal/app failed`)
	require.NotContains(t, rec.Recent()[0].Message, "hunter2")
}
