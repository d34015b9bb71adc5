package riverbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// PoolReplayWait returns the dead letters a replay made, and an error
// wrapping bustype.ErrReplayDeadLetters, not a quiet "caught up": here each
// replayed event is a new job, which the projection's own key refuses.
func TestPoolReplayWaitReturnsDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	jobtest.CreateEventOnceTable(t, b.db)
	ws := workers.NewRegistry()
	require.NoError(t, workers.AddArgsSafely(ws, jobtest.PoolArgs("journal"), &jobtest.EventOnce{DB: b.db}, nil))
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = admin.PoolCreate(ctx, bustype.PoolParams{Name: "journal", MaxAttempts: 1})
	require.NoError(t, err)
	client := riverbustest.StartClient(t, b.db, &riverbus.Config{Workers: ws})
	for range 5 {
		_, err := outbox.Append(ctx, b.db, outbox.Event{Type: "entry.posted", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	riverbustest.WaitForSequence(t, client, "journal", 5, 30*time.Second)

	replay, err := client.PoolReplayStart(ctx, "journal", 0)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 5}, []int64{replay.After, replay.Through})
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var polls int
	res, err := client.PoolReplayWait(waitCtx, replay, &riverbus.PoolReplayWaitOpts{
		PollInterval: 10 * time.Millisecond,
		ProgressFunc: func(riverbus.PoolReplayResult) { polls++ },
	})
	require.ErrorIs(t, err, bustype.ErrReplayDeadLetters)
	require.EqualError(t, err, `replay of pool "journal" (events after 0 through 5): 5 replayed events became dead letters`)
	require.True(t, res.Done())
	require.Equal(t, int64(5), res.DeadLetterCount)
	require.Len(t, res.DeadLetters, 5)
	for i, d := range res.DeadLetters {
		require.Equal(t, int64(i+1), d.GlobalSequence)
		require.Greater(t, d.JobID, replay.JobsAfter)
		require.Contains(t, d.LastError, `duplicate key value violates unique constraint "event_once_pkey"`)
	}
	require.Positive(t, polls)

	// Replayed again into a cleared journal: the first replay's dead
	// letters are of the same events, but not this replay's.
	_, err = b.db.Exec(ctx, `TRUNCATE event_once`)
	require.NoError(t, err)
	replay, err = client.PoolReplayStart(ctx, "journal", 3)
	require.NoError(t, err)
	res, err = client.PoolReplayWait(waitCtx, replay, nil)
	require.NoError(t, err)
	require.Equal(t, riverbus.PoolReplayResult{Pool: "journal", After: 3, Through: 5, Checkpoint: 5}, *res)

	_, err = client.PoolReplayWait(waitCtx, replay, &riverbus.PoolReplayWaitOpts{PollInterval: -time.Second})
	require.EqualError(t, err, "PollInterval must not be negative, got -1s")
	require.False(t, errors.Is(err, bustype.ErrReplayDeadLetters))
}
