package integration_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// never fails the test if cond becomes true within d.
func never(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("unexpectedly: %s", what)
		}
		time.Sleep(20 * time.Millisecond) // poll interval: cond is watched for all of d
	}
}

// Pause stops a pool's fan-out and its handlers, resume continues where it
// stopped, and reset to 0 re-delivers every event exactly once more.
func TestPauseResumeReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	b := setupOrdered(t, bustype.PoolParams{}, 10, rec)
	doneCount := func() int { d, _ := rec.snapshot(); return len(d) }
	first := appendKeyed(t, b.db, "k", 20)
	eventually(t, 30*time.Second, "first 20 worked", func() bool { return doneCount() == 20 })

	_, shared, err := pools.SetStatus(ctx, b.db, orderedPoolName, bustype.PoolPaused)
	require.NoError(t, err)
	require.False(t, shared)
	second := appendKeyed(t, b.db, "k", 20)
	// A job that exists while the pool is paused is not worked either.
	ins, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{})
	require.NoError(t, err)
	_, err = ins.Insert(ctx, orderedArgs{workers.Args{Event: outbox.Event{GlobalSequence: 999_999, Key: "manual", Data: json.RawMessage(`{}`)}}},
		&river.InsertOpts{Queue: bustype.DefaultQueue(orderedPoolName)})
	require.NoError(t, err)
	never(t, time.Second, "work or fan-out while paused", func() bool {
		return doneCount() != 20 || len(jobCounts(t, b.db, orderedPoolName)) != 21
	})

	_, _, err = pools.SetStatus(ctx, b.db, orderedPoolName, bustype.PoolActive)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "everything worked after resume", func() bool { return doneCount() == 41 })
	counts := jobCounts(t, b.db, orderedPoolName)
	for _, seq := range append(append([]int64{}, first...), second...) {
		require.Equal(t, 1, counts[seq], "sequence %d", seq)
	}

	p, err := pools.Reset(ctx, b.db, orderedPoolName, 0)
	require.NoError(t, err)
	require.Zero(t, p.Cursor)
	require.Zero(t, p.Checkpoint)
	eventually(t, 30*time.Second, "history re-delivered", func() bool { return doneCount() == 81 })
	counts = jobCounts(t, b.db, orderedPoolName)
	for _, seq := range append(append([]int64{}, first...), second...) {
		require.Equal(t, 2, counts[seq], "sequence %d: exactly once more after reset", seq)
	}
	never(t, 500*time.Millisecond, "more than once more", func() bool { return doneCount() != 81 })
}
