package riverbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// failingWorker fails the job of one sequence.
type failingWorker struct {
	river.WorkerDefaults[billingArgs]
	fail int64
}

func (w *failingWorker) Work(_ context.Context, job *river.Job[billingArgs]) error {
	if job.Args.GlobalSequence == w.fail {
		return errors.New("boom")
	}
	return nil
}

// startStatusPools creates the pools, pauses the one named "later", and
// starts a client whose billing handler fails the event of sequence fail.
func startStatusPools(t *testing.T, db *pgxpool.Pool, admin *riverbus.Client, fail int64, params ...bustype.PoolParams) *riverbus.Client {
	t.Helper()
	for _, p := range params {
		_, _, err := admin.PoolCreate(t.Context(), p)
		require.NoError(t, err)
	}
	_, err := admin.PoolPause(t.Context(), "later")
	require.NoError(t, err)
	ws := workers.NewRegistry()
	workers.Add(ws, &failingWorker{fail: fail}, nil)
	return riverbustest.StartClient(t, db, &riverbus.Config{Workers: ws})
}

// Status reads the horizon and, per pool, where it stands: what `riverbus
// status`, the metrics and `riverbus run`'s summary show.
func TestClientStatus(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)

	st, err := admin.Status(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Horizon)
	require.Nil(t, st.Pools)
	require.NotNil(t, st.Problems, "empty, not null, in JSON")

	client := startStatusPools(t, b.db, admin, 2,
		bustype.PoolParams{Name: "billing", MaxAttempts: 1},
		bustype.PoolParams{Name: "ledger", Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterBlock},
		bustype.PoolParams{Name: "later"})
	for _, key := range []string{"a", "b", "c"} {
		_, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Key: key, Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	riverbustest.WaitForSequence(t, client, "billing", 3, 30*time.Second)
	testwait.Eventually(t, 30*time.Second, func() bool {
		st, err = client.Status(ctx)
		require.NoError(t, err)
		return st.Pool("ledger").Cursor == 3
	}, "ledger was not fanned out")

	require.Equal(t, int64(3), st.Horizon)
	require.Equal(t, int64(3), st.LastSequence)
	require.Equal(t, int64(3), st.LastCommitted)
	require.False(t, st.HorizonUpdatedAt.IsZero())
	require.GreaterOrEqual(t, st.HorizonAgeSeconds, 0.0)
	require.Zero(t, st.OpenGaps)
	require.Empty(t, st.Problems)
	require.Len(t, st.Pools, 3)

	billing := st.Pool("billing")
	require.Equal(t, bustype.PoolActive, billing.Status)
	require.Equal(t, "none", billing.Ordering)
	require.Equal(t, int64(3), billing.Cursor)
	require.Equal(t, int64(3), billing.Checkpoint, "a dead letter is finished")
	require.Zero(t, billing.Lag)
	require.Equal(t, int64(3), billing.EventsFannedOut)
	require.Equal(t, map[bustype.JobState]int64{bustype.JobStateCompleted: 2, bustype.JobStateDiscarded: 1}, billing.Jobs)
	require.Equal(t, int64(1), billing.DeadLetters)
	require.Zero(t, billing.UndeliverableDeadLetters)
	require.Equal(t, "boom", billing.LastError, "the newest dead letter's error")
	require.Equal(t, int64(2), billing.CompletedLastMinute)
	require.Nil(t, billing.Holder)

	ledger := st.Pool("ledger")
	require.Equal(t, "key/block", ledger.Ordering)
	require.Equal(t, int64(3), ledger.Lag, "no worker runs it")
	require.Equal(t, int64(3), ledger.Jobs[bustype.JobStateAvailable], "three keys, three lanes")
	require.NotNil(t, ledger.Holder)
	require.Equal(t, int64(1), ledger.Holder.Sequence)
	require.Equal(t, bustype.JobStateAvailable, ledger.Holder.State)
	require.False(t, ledger.Holder.Stuck(), "held for less than checkpoint.StuckAfter by a job that has not failed")
	require.Equal(t, "a", *ledger.Holder.Lane)

	later := st.Pool("later")
	require.Equal(t, bustype.PoolPaused, later.Status)
	require.Zero(t, later.Cursor)
	require.Empty(t, later.Jobs)
	require.Nil(t, st.Pool("nope"))
}

// Status reports the retention policy and how old the oldest event in the
// log is, by the database's clock: what RiverbusRetentionHeld alerts on.
func TestStatusRetentionAndOldestEvent(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)

	st, err := admin.Status(ctx)
	require.NoError(t, err)
	require.False(t, st.RetentionEnabled)
	require.Zero(t, st.OldestEventAgeSeconds, "an empty log has no oldest event")

	// An import's event: it claims to have occurred 50 hours ago, but it
	// was appended just now, and that is its age.
	first, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`),
		OccurredAt: time.Now().Add(-50 * time.Hour)})
	require.NoError(t, err)
	_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = admin.RetentionSet(ctx, true, 24*time.Hour)
	require.NoError(t, err)

	st, err = admin.Status(ctx)
	require.NoError(t, err)
	require.True(t, st.RetentionEnabled)
	require.Equal(t, (24 * time.Hour).Seconds(), st.RetentionKeepSeconds)
	require.Less(t, st.OldestEventAgeSeconds, float64(600), "appended just now, whatever its occurred_at says")

	// 50 hours pass for the first event (only the owner can rewrite when
	// an event was appended).
	_, err = b.db.Exec(ctx, `UPDATE riverbus_event SET appended_at = appended_at - interval '50 hours' WHERE global_sequence = $1`, first[0].GlobalSequence)
	require.NoError(t, err)
	st, err = admin.Status(ctx)
	require.NoError(t, err)
	require.InDelta(t, (50 * time.Hour).Seconds(), st.OldestEventAgeSeconds, 600, "the first event's age, not the last's")
}

// The oldest event's age is how long ago the database appended it, which
// its appender cannot choose: an event claiming to occur in 2099 at the
// head of the log still ages, so RiverbusRetentionHeld can fire while it
// holds retention back (it used to read 0 for good).
func TestStatusOldestEventAgeIgnoresOccurredAt(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	for _, at := range []time.Time{time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), {}} {
		_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`), OccurredAt: at})
		require.NoError(t, err)
	}

	var st *riverbus.Status
	testwait.Eventually(t, 10*time.Second, func() bool {
		st, err = admin.Status(ctx)
		require.NoError(t, err)
		return st.OldestEventAgeSeconds >= 1
	}, "the oldest event's age, by the database's clock, to reach 1s")
	require.Less(t, st.OldestEventAgeSeconds, float64(600), "its age since it was appended, not until 2099")
}

// Status names each pool's condition (paused, stalled by a failing holder,
// active), its lag in time and its attempts, and lists the open gaps: what
// the riverbus page beside River UI shows.
func TestStatusConditionsAndRanges(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	client := startStatusPools(t, b.db, admin, 1,
		bustype.PoolParams{Name: "billing", MaxAttempts: 3, Retry: bustype.RetrySchedule{Base: time.Hour}},
		bustype.PoolParams{Name: "later"})
	_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Key: "a", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)

	// A transaction holding sequence 2 open while 3 commits: an open gap.
	held, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = outbox.Append(ctx, held, outbox.Event{Type: "InvoiceIssued", Key: "b", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Key: "c", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)

	var st *riverbus.Status
	testwait.Eventually(t, 30*time.Second, func() bool {
		st, err = client.Status(ctx)
		require.NoError(t, err)
		p := st.Pool("billing")
		return p.Holder != nil && p.Holder.Attempt == 1 && p.Holder.State == bustype.JobStateRetryable && len(st.GapRanges) == 1
	}, "billing's first job did not fail, or the gap was not seen")

	require.Equal(t, int64(1), st.Horizon)
	require.Equal(t, []riverbus.StatusRange{{First: 2, Last: 2, Since: st.GapRanges[0].Since}}, st.GapRanges)
	require.False(t, st.GapRanges[0].Since.IsZero())
	require.NotNil(t, st.SkippedRanges, "empty, not null, in JSON")
	require.Empty(t, st.SkippedRanges)

	billing := st.Pool("billing")
	require.Equal(t, riverbus.PoolConditionStalled, billing.Condition)
	require.Equal(t, 3, billing.MaxAttempts)
	require.Equal(t, int64(1), billing.Lag)
	require.Greater(t, billing.LagSeconds, 0.0)
	require.Equal(t, "boom", billing.Holder.LastError)
	require.Equal(t, 3, billing.Holder.MaxAttempts)

	later := st.Pool("later")
	require.Equal(t, riverbus.PoolConditionPaused, later.Condition)
	require.Equal(t, int64(1), later.Lag)
	require.Equal(t, "catching up", riverbus.PoolConditionCatchingUp.String())

	raw, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"gap_ranges":[{"first":2,"last":2,`)
	require.Contains(t, string(raw), `"condition":"stalled"`)
}
