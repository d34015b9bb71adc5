package pools_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/riversql"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// setup returns a fresh migrated database with n events appended.
func setup(t *testing.T, n int) (context.Context, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	for range n {
		_, err := outbox.Append(ctx, db, outbox.Event{Type: "invoice.paid", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	return ctx, db
}

// insertJob inserts a River job of pool in state.
func insertJob(t *testing.T, db *pgxpool.Pool, pool, state string) {
	t.Helper()
	_, err := db.Exec(context.Background(),
		`INSERT INTO river_job (kind, args, queue, max_attempts, state, finalized_at)
VALUES ($1, '{}', $1, 25, $2::river_job_state, CASE WHEN $2::text IN ('cancelled', 'completed', 'discarded') THEN now() END)`, pool, state)
	require.NoError(t, err)
}

func TestCreate(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 3)

	p, created, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing", EventTypes: []string{"b", "a", "b"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "billing", p.Name)
	require.Equal(t, bustype.DefaultQueue("billing"), p.Queue)
	require.Equal(t, []string{"a", "b"}, p.EventTypes, "types are sorted and unique")
	require.Equal(t, bustype.MaxAttemptsDefault, p.MaxAttempts)
	require.Equal(t, bustype.PriorityDefault, p.Priority)
	require.Equal(t, bustype.RetrySchedule{}.WithDefaults(), p.Retry)
	require.Equal(t, bustype.PoolActive, p.Status)
	require.Equal(t, int64(0), p.StartAfter, "from the beginning")

	// The same settings again: nothing changes.
	again, created, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing", EventTypes: []string{"a", "b"}})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, p.CreatedAt, again.CreatedAt)

	// Other settings: refused unless Update, which keeps the start point.
	_, _, err = pools.Create(ctx, db, bustype.PoolParams{Name: "billing", MaxAttempts: 3})
	require.ErrorIs(t, err, bustype.ErrPoolExists)
	require.ErrorContains(t, err, `create pool "billing"`)
	updated, created, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing", MaxAttempts: 3, From: bustype.FromSequence(2), Update: true})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 3, updated.MaxAttempts)
	require.Empty(t, updated.EventTypes)
	require.Equal(t, int64(0), updated.StartAfter, "an update never moves the start point")

	// From now: after the last sequence handed out.
	now, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "audit", From: bustype.FromNow})
	require.NoError(t, err)
	require.Equal(t, int64(3), now.StartAfter)

	for _, params := range []bustype.PoolParams{
		{Name: "x"},
		{Name: "billing2", Queue: "Upper"},
		{Name: "billing2", MaxAttempts: 1001},
		{Name: "billing2", Priority: 5},
		{Name: "billing2", Tags: []string{"novalue"}},
		{Name: "billing2", From: bustype.FromSequence(-1)},
	} {
		_, _, err := pools.Create(ctx, db, params)
		require.ErrorIs(t, err, bustype.ErrInvalidPool, "%+v", params)
	}
	_, err = pools.Get(ctx, db, "billing2")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
}

// A start beyond the end of the log is refused with where the log ends; at
// the end it is accepted.
func TestCreateRefusesAStartBeyondTheLog(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 3)

	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "future", From: bustype.FromSequence(4)})
	var beyond *bustype.StartBeyondLogError
	require.ErrorAs(t, err, &beyond)
	require.Equal(t, bustype.StartBeyondLogError{What: "start sequence", Position: 4, LastSequence: 3}, *beyond)
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	_, err = pools.Get(ctx, db, "future")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)

	p, created, err := pools.Create(ctx, db, bustype.PoolParams{Name: "future", From: bustype.FromSequence(3)})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, int64(3), p.StartAfter)
}

func TestGetListAndUnknownError(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 0)

	err := pools.UnknownError(ctx, db, "billing")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.EqualError(t, err, `unknown pool "billing": no pools exist yet`)
	list, err := pools.List(ctx, db)
	require.NoError(t, err)
	require.Empty(t, list)

	for _, name := range []string{"shipping", "audit", "billing"} {
		_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: name})
		require.NoError(t, err)
	}
	list, err = pools.List(ctx, db)
	require.NoError(t, err)
	names := make([]string, len(list))
	for i, p := range list {
		names[i] = p.Name
	}
	require.Equal(t, []string{"audit", "billing", "shipping"}, names, "by name")

	p, err := pools.Get(ctx, db, "billing")
	require.NoError(t, err)
	require.Equal(t, "billing", p.Name)
	_, err = pools.Get(ctx, db, "billling")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.EqualError(t, err, `unknown pool "billling": pools are audit, billing, shipping`)
}

func TestReset(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 3)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)

	p, err := pools.Reset(ctx, db, "billing", 2)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 2}, []int64{p.Cursor, p.Checkpoint})
	insertJob(t, db, "billing", "completed")
	r, err := pools.ResetReplay(ctx, db, "billing", 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.After)
	require.Equal(t, int64(1), r.Pool.Cursor)
	var maxJob int64
	require.NoError(t, db.QueryRow(ctx, `SELECT max(id) FROM river_job`).Scan(&maxJob))
	require.Equal(t, maxJob, r.JobsAfter)

	_, err = pools.Reset(ctx, db, "billing", 999999)
	var beyond *bustype.StartBeyondLogError
	require.ErrorAs(t, err, &beyond)
	require.EqualError(t, err, `reset pool "billing": invalid pool: reset position 999999 is beyond the end of the log `+
		`(last sequence handed out 3): the next 999996 events appended would never reach the pool; give 3 or less`)
	_, err = pools.Reset(ctx, db, "billing", -1)
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	p, err = pools.Get(ctx, db, "billing")
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Cursor, "a refused reset moves nothing")

	_, err = pools.Reset(ctx, db, "nobody", 1)
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.ErrorContains(t, err, `"nobody"`)
}

func TestSetStatus(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 0)
	for _, params := range []bustype.PoolParams{{Name: "billing"}, {Name: "audit", Queue: "shared"}, {Name: "ledger", Queue: "shared"}} {
		_, _, err := pools.Create(ctx, db, params)
		require.NoError(t, err)
	}
	queuePaused := func(queue string) bool {
		var paused bool
		require.NoError(t, db.QueryRow(ctx, `SELECT paused_at IS NOT NULL FROM river_queue WHERE name = $1`, queue).Scan(&paused))
		return paused
	}

	p, shared, err := pools.SetStatus(ctx, db, "billing", bustype.PoolPaused)
	require.NoError(t, err)
	require.False(t, shared)
	require.Equal(t, bustype.PoolPaused, p.Status)
	require.True(t, queuePaused(p.Queue), "a queue of its own is paused with the pool")
	p, _, err = pools.SetStatus(ctx, db, "billing", bustype.PoolActive)
	require.NoError(t, err)
	require.Equal(t, bustype.PoolActive, p.Status)
	require.False(t, queuePaused(p.Queue))

	p, shared, err = pools.SetStatus(ctx, db, "audit", bustype.PoolPaused)
	require.NoError(t, err)
	require.True(t, shared, "another pool works the queue")
	require.Equal(t, bustype.PoolPaused, p.Status)
	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_queue WHERE name = 'shared' AND paused_at IS NOT NULL`).Scan(&rows))
	require.Zero(t, rows, "a shared queue is left running")

	_, _, err = pools.SetStatus(ctx, db, "billing", "stopped")
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	_, _, err = pools.SetStatus(ctx, db, "nobody", bustype.PoolPaused)
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.ErrorContains(t, err, `"nobody"`)
}

// River's pause of a queue (River UI's button, QueuePause, "*" for every
// queue) pauses every pool of it, its resume resumes them; a queue row
// made anew while its pools are paused (River's queue cleaner deletes an
// idle one, a worker's start makes it again) starts paused. A worker
// starting then would otherwise run the paused pool's jobs.
func TestRiverQueuePauseIsThePoolsPause(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 0)
	for _, params := range []bustype.PoolParams{{Name: "billing"}, {Name: "audit", Queue: "shared"}, {Name: "ledger", Queue: "shared"}} {
		_, _, err := pools.Create(ctx, db, params)
		require.NoError(t, err)
	}
	statuses := func() map[string]bustype.PoolStatus {
		got := map[string]bustype.PoolStatus{}
		list, err := pools.List(ctx, db)
		require.NoError(t, err)
		for _, p := range list {
			got[p.Name] = p.Status
		}
		return got
	}
	rc, err := river.NewClient(workers.NewDriver(db, nil), &river.Config{})
	require.NoError(t, err)
	for _, q := range []string{"billing", "shared"} {
		_, err := db.Exec(ctx, riversql.QueueEnsure, q)
		require.NoError(t, err)
	}

	require.NoError(t, rc.QueuePause(ctx, "shared", nil))
	require.Equal(t, map[string]bustype.PoolStatus{"billing": "active", "audit": "paused", "ledger": "paused"}, statuses())
	require.NoError(t, rc.QueueResume(ctx, "shared", nil))
	require.Equal(t, map[string]bustype.PoolStatus{"billing": "active", "audit": "active", "ledger": "active"}, statuses())
	require.NoError(t, rc.QueuePause(ctx, "*", nil))
	require.Equal(t, map[string]bustype.PoolStatus{"billing": "paused", "audit": "paused", "ledger": "paused"}, statuses())

	// An update that leaves paused_at as it is (River's producers touch
	// updated_at) changes no pool.
	_, _, err = pools.SetStatus(ctx, db, "audit", bustype.PoolActive)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE river_queue SET updated_at = now()`)
	require.NoError(t, err)
	require.Equal(t, bustype.PoolActive, statuses()["audit"])

	_, err = db.Exec(ctx, `DELETE FROM river_queue`)
	require.NoError(t, err)
	for _, q := range []string{"billing", "shared"} {
		_, err := db.Exec(ctx, riversql.QueueEnsure, q)
		require.NoError(t, err)
	}
	var billingPaused, sharedPaused bool
	require.NoError(t, db.QueryRow(ctx, `SELECT
		(SELECT paused_at IS NOT NULL FROM river_queue WHERE name = 'billing'),
		(SELECT paused_at IS NOT NULL FROM river_queue WHERE name = 'shared')`).Scan(&billingPaused, &sharedPaused))
	require.True(t, billingPaused, "the queue of a paused pool starts paused")
	require.False(t, sharedPaused, "a queue with an active pool starts active")
}

func TestDelete(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 0)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	insertJob(t, db, "billing", "available")
	insertJob(t, db, "billing", "completed")

	err = pools.Delete(ctx, db, "billing", false)
	require.ErrorIs(t, err, bustype.ErrPoolBusy)
	require.ErrorContains(t, err, "1 job(s) not finished")
	_, err = pools.Get(ctx, db, "billing")
	require.NoError(t, err, "a refused delete keeps the pool")

	require.NoError(t, pools.Delete(ctx, db, "billing", true))
	_, err = pools.Get(ctx, db, "billing")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	var waiting int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'billing' AND state = 'available'`).Scan(&waiting))
	require.Zero(t, waiting, "force deletes the waiting jobs")

	err = pools.Delete(ctx, db, "billing", false)
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.ErrorContains(t, err, `"billing"`)
}

func TestEventTypesAbsent(t *testing.T) {
	t.Parallel()
	ctx, db := setup(t, 2)
	absent, err := pools.EventTypesAbsent(ctx, db, []string{"invoice.payed", "invoice.paid", "invoice.sent"})
	require.NoError(t, err)
	require.Equal(t, []string{"invoice.payed", "invoice.sent"}, absent)
	absent, err = pools.EventTypesAbsent(ctx, db, nil)
	require.NoError(t, err)
	require.Empty(t, absent)
}
