package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

// PostgreSQL restarts (fast shutdown, every connection cut) while writers,
// a fan-out process and a worker process run. Everything reconnects; every
// committed event ends as exactly one job, and every job is worked.
func TestDatabaseRestartMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a PostgreSQL server")
	}
	t.Parallel()
	ctx := context.Background()
	srv, dbURL := pgtest.NewServer(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "survivor", MaxAttempts: 25})
	require.NoError(t, err)

	env := []string{"RIVERBUS_POLL_INTERVAL=200ms", "RIVERBUS_LOG_LEVEL=warn"}
	fan := start(t, dbURL, "riverbus", env, "fanout")
	worker := start(t, dbURL, "testworker", nil, "-pool", "survivor", "-id", "w")
	worker.waitOutput("ready", 30*time.Second)

	load := startWriters(ctx, db, writerOpts{writers: 8, perWriter: 80, rollbackPercent: 10, maxHold: 10 * time.Millisecond})
	// Restart once the run is well under way.
	testwait.Eventually(t, 30*time.Second, func() bool { return len(jobCounts(t, db, "survivor")) > 50 }, "some events fanned out")
	require.NoError(t, srv.Restart(ctx))
	t.Log("PostgreSQL restarted")

	committed := load.wait(t, db)
	t.Logf("%d events committed, %d rolled back", len(committed), load.rolledBack)
	testwait.Eventually(t, 90*time.Second, func() bool {
		var pending int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'survivor' AND state <> 'completed'`).Scan(&pending); err != nil {
			return false // a dead connection from before the restart
		}
		return pending == 0 && len(jobCounts(t, db, "survivor")) >= len(committed)
	}, "every committed event fanned out once and worked")
	counts := jobCounts(t, db, "survivor")
	require.Len(t, counts, len(committed))
	for seq, n := range counts {
		require.True(t, committed[seq], "job for sequence %d, which never committed", seq)
		require.Equal(t, 1, n, "sequence %d has %d jobs", seq, n)
	}
	worked := attempts(t, db)
	for seq := range committed {
		require.NotEmpty(t, worked[seq], "sequence %d was never worked", seq)
	}
	h, err := horizon.Get(ctx, db)
	require.NoError(t, err)
	t.Logf("gaps proven dead %d, skipped %d, late %d", h.GapsProvenDead, h.GapsSkipped, h.LateEvents)
	fan.stop()
	worker.stop()
}
