package riverbus_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	db *pgxpool.Pool
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	return context.Background(), &testBundle{db: pgtest.NewPool(t)}
}

type billingArgs struct{ workers.Args }

func (billingArgs) Kind() string { return "billing" }

type auditArgs struct{ workers.Args }

func (auditArgs) Kind() string { return "audit" }

// recordingWorker records the sequences it handled.
type recordingWorker[T interface {
	river.JobArgs
	sequence() int64
}] struct {
	river.WorkerDefaults[T]
	mu   sync.Mutex
	seen []int64
	done chan struct{}
	want int
}

func (a billingArgs) sequence() int64 { return a.GlobalSequence }
func (a auditArgs) sequence() int64   { return a.GlobalSequence }

func (w *recordingWorker[T]) Work(_ context.Context, job *river.Job[T]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, job.Args.sequence())
	if len(w.seen) == w.want {
		close(w.done)
	}
	return nil
}

func newRecorder[T interface {
	river.JobArgs
	sequence() int64
}](want int) *recordingWorker[T] {
	return &recordingWorker[T]{want: want, done: make(chan struct{})}
}

func TestClientRunsFanoutAndBoundWorkers(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, created, err := admin.PoolCreate(ctx, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	require.True(t, created)

	w := newRecorder[billingArgs](3)
	ws := workers.NewRegistry()
	workers.Add(ws, w, nil)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })
	require.NotNil(t, client.River())

	for range 3 {
		_, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not see the three events")
	}
	w.mu.Lock()
	require.ElementsMatch(t, []int64{1, 2, 3}, w.seen)
	w.mu.Unlock()

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, client.CheckpointWait(waitCtx, "billing", 3, nil))
	st, err := client.CheckpointGet(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Checkpoint)
}

func TestClientRefusesWorkersWithoutTheirPool(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	ws := workers.NewRegistry()
	workers.Add(ws, newRecorder[billingArgs](1), nil)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	err = client.Start(ctx)
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.ErrorContains(t, err, `workers are registered for "billing", which does not exist`)
	require.Nil(t, client.River(), "nothing runs after a refused Start")
}

func TestClientRefusesAQueueWithAPoolItDoesNotWork(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	for _, name := range []string{"billing", "audit"} {
		_, _, err := admin.PoolCreate(ctx, bustype.PoolParams{Name: name, Queue: "shared"})
		require.NoError(t, err)
	}

	ws := workers.NewRegistry()
	workers.Add(ws, newRecorder[billingArgs](1), nil)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	err = client.Start(ctx)
	require.ErrorContains(t, err, `River queue "shared" also holds pool(s) "audit", which have no worker here`)

	// With both bound, the shared queue is worked for both.
	workers.Add(ws, newRecorder[auditArgs](1), nil)
	client, err = riverbus.NewClient(b.db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	require.NoError(t, client.Stop(ctx))
}

func TestClientStartRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	client, err := riverbus.NewClient(db, nil)
	require.NoError(t, err)
	require.ErrorIs(t, client.Start(ctx), riverbus.ErrNotMigrated)
}

func TestNewClientNamesTheBadField(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	_, err := riverbus.NewClient(b.db, &riverbus.Config{CheckpointInterval: -time.Second})
	require.EqualError(t, err, "riverbus: CheckpointInterval must be positive, got -1s")
	_, err = riverbus.NewClient(b.db, &riverbus.Config{Work: workers.Config{FetchCooldown: time.Microsecond}})
	require.ErrorContains(t, err, "riverbus: Work: FetchCooldown must be at least 1ms")
}

func TestPoolUpdateKeepsUnsetSettings(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	client, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "ledger", Ordering: bustype.OrderingKey, Tags: []string{"region=eu"}, MaxAttempts: 3})
	require.NoError(t, err)
	p, err := client.PoolUpdate(ctx, "ledger", riverbus.PoolUpdateParams{Priority: 2})
	require.NoError(t, err)
	require.Equal(t, bustype.OrderingKey, p.Ordering)
	require.Equal(t, []string{"region=eu"}, p.Tags)
	require.Equal(t, 3, p.MaxAttempts)
	require.Equal(t, 2, p.Priority)
	require.Equal(t, bustype.RetryScheduleDefault, p.Retry)

	p, err = client.PoolUpdate(ctx, "ledger", riverbus.PoolUpdateParams{Retry: bustype.RetrySchedule{MaxDelay: 10 * time.Minute, Jitter: -1}})
	require.NoError(t, err)
	require.Equal(t, bustype.RetrySchedule{Base: time.Second, Factor: 2, MaxDelay: 10 * time.Minute}, p.Retry)
	p, err = client.PoolUpdate(ctx, "ledger", riverbus.PoolUpdateParams{Retry: bustype.RetrySchedule{Factor: 3}})
	require.NoError(t, err)
	require.Equal(t, bustype.RetrySchedule{Base: time.Second, Factor: 3, MaxDelay: 10 * time.Minute}, p.Retry, "no jitter stays none")
	_, err = client.PoolUpdate(ctx, "ledger", riverbus.PoolUpdateParams{Retry: bustype.RetrySchedule{Base: time.Hour}})
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	require.ErrorContains(t, err, "retry max delay must be at least the retry base (1h0m0s), got 10m0s")

	_, err = client.PoolUpdate(ctx, "ledger", riverbus.PoolUpdateParams{Ordering: "sideways"})
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	_, err = client.PoolUpdate(ctx, "nope", riverbus.PoolUpdateParams{Priority: 2})
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
}
