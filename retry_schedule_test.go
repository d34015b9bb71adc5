package riverbus_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// TestFailedJobRetriesOnItsPoolsSchedule runs a failing handler under a
// started Client and checks, in the job's row, that each retry is
// scheduled by the pool's schedule (River's default would be 1s, 16s),
// that an operator's retry (River UI's button: JobRetry) runs the job at
// once and leaves the schedule to go on, and that a pool update reaches a
// running worker.
func TestFailedJobRetriesOnItsPoolsSchedule(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = admin.PoolCreate(ctx, bustype.PoolParams{Name: "billing", MaxAttempts: 10,
		Retry: bustype.RetrySchedule{Base: 10 * time.Minute, Factor: 2, MaxDelay: time.Hour, Jitter: -1}})
	require.NoError(t, err)

	ws := workers.NewRegistry()
	workers.Add(ws, &failingWorker{fail: 1}, nil)
	client := riverbustest.StartClient(t, b.db, &riverbus.Config{Workers: ws, Work: workers.Config{RetryRefreshInterval: time.Millisecond}})

	_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	var id int64
	testwait.Eventually(t, 30*time.Second, func() bool {
		return b.db.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = 'billing'`).Scan(&id) == nil
	}, "the fan-out made the job")

	// Allow for the time between the attempt's start and the policy's
	// clock reading: the handler's run and River's bookkeeping.
	const slack = 30 * time.Second
	d := jobtest.WaitRetryDelay(t, b.db, id, 1)
	require.GreaterOrEqual(t, d, 10*time.Minute)
	require.Less(t, d, 10*time.Minute+slack)

	// An operator's retry runs it now; its next failure is the second.
	_, err = client.River().JobRetry(ctx, id)
	require.NoError(t, err)
	d = jobtest.WaitRetryDelay(t, b.db, id, 2)
	require.GreaterOrEqual(t, d, 20*time.Minute)
	require.Less(t, d, 20*time.Minute+slack)

	// A pool update reaches the running worker.
	_, err = admin.PoolUpdate(ctx, "billing", riverbus.PoolUpdateParams{Retry: bustype.RetrySchedule{MaxDelay: 15 * time.Minute}})
	require.NoError(t, err)
	_, err = client.River().JobRetry(ctx, id)
	require.NoError(t, err)
	d = jobtest.WaitRetryDelay(t, b.db, id, 3)
	require.GreaterOrEqual(t, d, 15*time.Minute, "40m capped at the new 15m")
	require.Less(t, d, 15*time.Minute+slack)
}
