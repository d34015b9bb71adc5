package integration_test

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

// A pool's pause is one state, whichever door it came through: River UI's
// Pause and Resume on the pool's queue (its HTTP API, served by `riverbus
// run`) pause and resume the pool's fan-out as well as its workers, and
// `riverbus pool pause` / `resume` pause and resume the queue River UI
// shows. Before, River UI's Resume showed the queue active while the pool
// stayed paused and nothing moved until `riverbus pool resume`.
func TestOnePauseThroughRiverUIAndTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	p, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)

	queueURL := startRun(t, dbURL) + "/api/queues/" + p.Queue
	w := start(t, dbURL, "testworker", nil, "-pool", "billing")
	w.waitOutput("ready", 30*time.Second)

	status := func() bustype.PoolStatus {
		got, err := pools.Get(ctx, db, "billing")
		require.NoError(t, err)
		return got.Status
	}
	queuePaused := func() bool {
		var paused bool
		require.NoError(t, db.QueryRow(ctx, `SELECT paused_at IS NOT NULL FROM river_queue WHERE name = $1`, p.Queue).Scan(&paused))
		return paused
	}
	// appendAndHold appends n events and, once the horizon has passed
	// them, checks that the pool made no job of any: its fan-out is paused.
	appendAndHold := func(n int) int64 {
		last := appendKeyed(t, db, "k", n)[n-1]
		testwait.Eventually(t, 30*time.Second, func() bool {
			var h int64
			require.NoError(t, db.QueryRow(ctx, `SELECT horizon FROM riverbus_horizon`).Scan(&h))
			return h >= last
		}, "the horizon passes the events appended while paused")
		time.Sleep(time.Second) // a fan-out round after the horizon moved
		got, err := pools.Get(ctx, db, "billing")
		require.NoError(t, err)
		require.Less(t, got.Cursor, last, "a paused pool's fan-out made jobs")
		return last
	}
	delivered := func(last int64, why string) {
		testwait.Eventually(t, 30*time.Second, func() bool {
			var done bool
			require.NoError(t, db.QueryRow(ctx, `SELECT count(*) = $1 FROM river_job WHERE kind = 'billing' AND state = 'completed'`, last).Scan(&done))
			return done
		}, "%s", why)
	}
	delivered(appendKeyed(t, db, "k", 3)[2], "the pool works before any pause")

	require.NoError(t, riverUIRequest(ctx, http.MethodPut, queueURL+"/pause", `{}`))
	require.Equal(t, bustype.PoolPaused, status(), "River UI's Pause pauses the pool")
	last := appendAndHold(5)
	require.NoError(t, riverUIRequest(ctx, http.MethodPut, queueURL+"/resume", `{}`))
	require.Equal(t, bustype.PoolActive, status(), "River UI's Resume resumes the pool")
	delivered(last, "after River UI's Resume every event is delivered")

	cli := func(args ...string) {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "riverbus"), args...)
		cmd.Env = append(cmd.Environ(), "DATABASE_URL="+dbURL)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	cli("pool", "pause", "billing")
	require.True(t, queuePaused(), "riverbus pool pause pauses the queue River UI shows")
	last = appendAndHold(5)
	require.NoError(t, riverUIRequest(ctx, http.MethodPut, queueURL+"/resume", `{}`))
	require.Equal(t, bustype.PoolActive, status(), "River UI's Resume undoes riverbus pool pause")
	delivered(last, "after River UI's Resume of a CLI pause every event is delivered")

	require.NoError(t, riverUIRequest(ctx, http.MethodPut, queueURL+"/pause", `{}`))
	cli("pool", "resume", "billing")
	require.False(t, queuePaused(), "riverbus pool resume resumes River UI's pause")
	delivered(appendKeyed(t, db, "k", 2)[1], "after riverbus pool resume of a River UI pause every event is delivered")
}
