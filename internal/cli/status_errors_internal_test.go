package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
)

// While an operation that concerns a pool fails, or a process has stopped
// reporting, the pool's progress has no ETA: a rate measured while its
// completions fail promises nothing (status printed "ETA 22m" while they
// did). A failure of another pool's batch leaves its ETA alone.
func TestProgressHasNoETAWhileFailing(t *testing.T) {
	pool := &riverbus.StatusPool{Name: "billing", Queue: "billing", Checkpoint: 1000, Lag: 9000, CompletedLastMinute: 600}
	proc := &riverbus.StatusProcess{Name: "riverbus work --pool billing", PID: 7, Host: "w1", Errors: []riverbus.StatusError{}}
	r := &riverbus.Status{Horizon: 10_000, Pools: []*riverbus.StatusPool{pool}, Processes: []*riverbus.StatusProcess{proc}}
	require.Contains(t, progress(r, pool, nil), "ETA 15m0s")

	proc.Errors = []riverbus.StatusError{{Operation: "pool batch", Subject: "audit", Count: 3}}
	require.Contains(t, progress(r, pool, nil), "ETA 15m0s", "another pool's failure")

	proc.Errors = []riverbus.StatusError{{Operation: "River complete", Count: 57, Since: time.Now().Add(-time.Minute), LastAgeSeconds: 2,
		LastError: "ERROR: could not extend file: No space left on device"}}
	line := progress(r, pool, nil)
	require.NotContains(t, line, "ETA 15m")
	require.Contains(t, line, "no ETA: River complete failing (see ERROR above)")
	var out bytes.Buffer
	require.NoError(t, render(&out, r, nil))
	require.Regexp(t, `ERROR in riverbus work --pool billing \(pid 7 on w1\): River complete failed 57 times since \d\d:\d\d:\d\d, last 2s ago: "ERROR: could not extend file: No space left on device"`, out.String())
	require.Contains(t, oneLine(r), "ERROR River complete x57")

	proc.Errors = []riverbus.StatusError{}
	proc.Stale, proc.ReportAgeSeconds, proc.ReportIntervalSeconds = true, 95, 10
	require.Contains(t, progress(r, pool, nil), "no ETA: riverbus work --pool billing stopped reporting (see STALE above)")
	out.Reset()
	require.NoError(t, render(&out, r, nil))
	require.Contains(t, out.String(), "STALE: riverbus work --pool billing (pid 7 on w1) has not reported for 1m35s (it reports every 10s): it was killed, or it cannot write to the database")
}

// A paused pool reads paused with its lag, never an ETA: status printed
// "catching up … ETA 8h20m0s" for a pool that would not move until
// resumed.
func TestPausedPoolHasNoETA(t *testing.T) {
	pool := &riverbus.StatusPool{Name: "billing", Queue: "billing", Status: bustype.PoolPaused, Checkpoint: 1000, Lag: 9000, CompletedLastMinute: 600}
	r := &riverbus.Status{Horizon: 10_000, Pools: []*riverbus.StatusPool{pool}}
	line := progress(r, pool, nil)
	require.Equal(t, "billing paused: 9000 behind, waiting for `riverbus pool resume billing`", line)
	pool.Lag = 301 // below the lag from which a running pool's bar is drawn
	require.Contains(t, progress(r, pool, nil), "billing paused: 301 behind")
	var out bytes.Buffer
	require.NoError(t, render(&out, r, nil))
	require.NotContains(t, out.String(), "ETA")
	require.NotContains(t, out.String(), "catching up")
	require.Contains(t, oneLine(r), "billing lag 301 done 0 PAUSED")
	pool.Status = bustype.PoolActive
	pool.Lag = 9000
	require.Contains(t, progress(r, pool, nil), "catching up")
}

// The table's STATUS is the pool's condition, as the riverbus page shows
// it, and LAG TIME how long ago its oldest unfinished event was appended.
func TestStatusTableShowsConditionAndLagTime(t *testing.T) {
	r := &riverbus.Status{Horizon: 5000, Pools: []*riverbus.StatusPool{
		{Name: "billing", Status: bustype.PoolActive, Condition: riverbus.PoolConditionStalled, Checkpoint: 4000, Lag: 1000, LagSeconds: 95.4},
		{Name: "audit", Status: bustype.PoolPaused, Condition: riverbus.PoolConditionPaused, Checkpoint: 4990, Lag: 10, LagSeconds: 3},
		{Name: "ledger", Status: bustype.PoolActive, Condition: riverbus.PoolConditionCatchingUp, Checkpoint: 3000, Lag: 2000, LagSeconds: 7200},
		{Name: "mail", Status: bustype.PoolActive, Checkpoint: 5000},
	}}
	var out bytes.Buffer
	require.NoError(t, render(&out, r, nil))
	require.Contains(t, out.String(), "LAG TIME")
	require.Regexp(t, `(?m)^billing\s+stalled\s+\S*\s+0\s+4000\s+1000\s+1m35s\s`, out.String())
	require.Regexp(t, `(?m)^audit\s+paused\s+\S*\s+0\s+4990\s+10\s+3s\s`, out.String())
	require.Regexp(t, `(?m)^ledger\s+catching up\s+\S*\s+0\s+3000\s+2000\s+2h0m0s\s`, out.String())
	require.Regexp(t, `(?m)^mail\s+active\s+\S*\s+0\s+5000\s+0\s+-\s`, out.String(), "no condition: the status; not behind: no lag time")
}
