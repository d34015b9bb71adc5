package integration_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// Pause stops a pool's fan-out and its handlers, resume continues where it
// stopped, and reset to 0 re-delivers every event exactly once more.
func TestPauseResumeReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	b := setupOrdered(t, bustype.PoolParams{}, 10, rec)
	doneCount := func() int { d, _ := rec.snapshot(); return len(d) }
	first := appendKeyed(t, b.db, "k", 20)
	testwait.Eventually(t, 30*time.Second, func() bool { return doneCount() == 20 }, "first 20 worked")

	paused, stopPaused := b.river.Subscribe(river.EventKindQueuePaused)
	defer stopPaused()
	_, shared, err := pools.SetStatus(ctx, b.db, orderedPoolName, bustype.PoolPaused)
	require.NoError(t, err)
	require.False(t, shared)
	// River hands a queue's pause to a running producer by notification:
	// wait until the worker has taken it before giving it a job to refuse.
	select {
	case <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never took the pool's pause")
	}
	second := appendKeyed(t, b.db, "k", 20)
	// A job that exists while the pool is paused is not worked either.
	ins, err := river.NewClient(workers.NewDriver(b.db, nil), &river.Config{})
	require.NoError(t, err)
	_, err = ins.Insert(ctx, orderedArgs{workers.Args{Event: outbox.Event{GlobalSequence: 999_999, Key: "manual", Data: json.RawMessage(`{}`)}}},
		&river.InsertOpts{Queue: bustype.DefaultQueue(orderedPoolName)})
	require.NoError(t, err)
	testwait.Never(t, time.Second, func() bool {
		return doneCount() != 20 || len(jobCounts(t, b.db, orderedPoolName)) != 21
	}, "work or fan-out while paused")

	_, _, err = pools.SetStatus(ctx, b.db, orderedPoolName, bustype.PoolActive)
	require.NoError(t, err)
	testwait.Eventually(t, 30*time.Second, func() bool { return doneCount() == 41 }, "everything worked after resume")
	counts := jobCounts(t, b.db, orderedPoolName)
	for _, seq := range append(append([]int64{}, first...), second...) {
		require.Equal(t, 1, counts[seq], "sequence %d", seq)
	}

	p, err := pools.Reset(ctx, b.db, orderedPoolName, 0)
	require.NoError(t, err)
	require.Zero(t, p.Cursor)
	require.Zero(t, p.Checkpoint)
	testwait.Eventually(t, 30*time.Second, func() bool { return doneCount() == 81 }, "history re-delivered")
	counts = jobCounts(t, b.db, orderedPoolName)
	for _, seq := range append(append([]int64{}, first...), second...) {
		require.Equal(t, 2, counts[seq], "sequence %d: exactly once more after reset", seq)
	}
	testwait.Never(t, 500*time.Millisecond, func() bool { return doneCount() != 81 }, "more than once more")
}
