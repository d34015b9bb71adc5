package integration_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

// Two `riverbus fanout` processes and three in-process fan-outs on one
// database while writers run; the processes are killed with SIGKILL again
// and again, in the middle of batches, and restarted. Every committed event
// must end as exactly one job per pool.
func TestFanoutProcessesKilledMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	for _, name := range []string{"p1", "p2", "p3"} {
		_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: name})
		require.NoError(t, err)
	}
	// Small batches, so a kill lands in the middle of many of them. At
	// level info a process says "fan-out started" once it handles SIGTERM:
	// the last one restarted may be stopped before it has.
	env := []string{"RIVERBUS_BATCH_SIZE=7", "RIVERBUS_POLL_INTERVAL=50ms", "RIVERBUS_LOG_LEVEL=info"}
	fanoutProc := func() *proc { return start(t, dbURL, "riverbus", env, "fanout").readyOn("fan-out started") }
	procs := []*proc{fanoutProc(), fanoutProc()}

	// Three more instances in this process.
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 3)
	for range 3 {
		inProc, err := fanout.New(db, &fanout.Config{BatchSize: 5, PollInterval: 50 * time.Millisecond, Logger: discardLogger()})
		require.NoError(t, err)
		go func() { done <- inProc.Run(runCtx) }()
	}

	load := startWriters(ctx, db, writerOpts{writers: 16, perWriter: 60, rollbackPercent: 10, maxHold: 5 * time.Millisecond})
	writersDone := make(chan struct{})
	go func() { load.wg.Wait(); close(writersDone) }()

	kills := 0
	for stop := false; !stop; {
		select {
		case <-writersDone:
			stop = true
		case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
			i := rand.IntN(len(procs))
			procs[i].kill9()
			kills++
			procs[i] = fanoutProc()
		}
	}
	committed := load.wait(t, db)
	t.Logf("%d events committed, %d rolled back, %d kills", len(committed), load.rolledBack, kills)
	require.Greater(t, kills, 2)

	// The in-process instances are not needed to finish: stop them, and let
	// the processes finish.
	cancel()
	for range 3 {
		require.NoError(t, <-done)
	}
	testwait.Eventually(t, 60*time.Second, func() bool {
		for _, pool := range []string{"p1", "p2", "p3"} {
			if len(jobCounts(t, db, pool)) < len(committed) {
				return false
			}
		}
		return true
	}, "every committed event fanned out to every pool")
	for _, pool := range []string{"p1", "p2", "p3"} {
		counts := jobCounts(t, db, pool)
		require.Len(t, counts, len(committed), pool)
		for seq, n := range counts {
			require.True(t, committed[seq], "pool %s: job for sequence %d, which never committed", pool, seq)
			require.Equal(t, 1, n, "pool %s: sequence %d has %d jobs", pool, seq, n)
		}
	}
	for _, p := range procs {
		p.stop()
	}
}

func TestFanoutProcessReportsBadConfig(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	p := start(t, dbURL, "riverbus", []string{"RIVERBUS_GAP_TIMEOUT=-3s"}, "fanout")
	<-p.done
	require.Error(t, p.err)
	require.Contains(t, p.out.String(), "RIVERBUS_GAP_TIMEOUT (--gap-timeout) must be positive, got -3s")
}
