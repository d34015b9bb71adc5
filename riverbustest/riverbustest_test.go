package riverbustest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

func TestMain(m *testing.M) { riverbustest.Main(m) }

type billingArgs struct{ workers.Args }

func (billingArgs) Kind() string { return "billing" }

// billingWorker records the sequences it handled.
type billingWorker struct {
	river.WorkerDefaults[billingArgs]
	mu   sync.Mutex
	seen []int64
}

func (w *billingWorker) Work(_ context.Context, job *river.Job[billingArgs]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, job.Args.GlobalSequence)
	return nil
}

// recordingTB is a TB whose Fatalf records the failure instead of ending the
// test.
type recordingTB struct {
	testing.TB
	failures []string
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func appendEvent(t *testing.T, db outbox.TxBeginner) int64 {
	t.Helper()
	appended, err := outbox.Append(context.Background(), db, outbox.Event{Type: "invoice.paid", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return appended[0].GlobalSequence
}

func TestEnvURLIsPgtests(t *testing.T) {
	require.Equal(t, pgtest.EnvURL, riverbustest.EnvURL)
}

func TestNewDatabaseIsFreshAndMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	a, b := riverbustest.NewDatabase(t), riverbustest.NewDatabase(t)
	t.Logf("two databases in %s", time.Since(start).Round(time.Millisecond))

	all, err := migrations.All()
	require.NoError(t, err)
	version, err := migrations.Version(ctx, a)
	require.NoError(t, err)
	require.Equal(t, all[len(all)-1].Version, version)

	require.Equal(t, int64(1), appendEvent(t, a))
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM riverbus_event`).Scan(&n))
	require.Zero(t, n, "each test's database is its own")
}

// CreatePool makes the pool a test's handlers work, without an operator
// client; a second call with the same settings returns it, one with other
// settings fails the test naming the pool.
func TestCreatePool(t *testing.T) {
	t.Parallel()
	db := riverbustest.NewDatabase(t)
	p := riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "billing", Ordering: bustype.OrderingKey})
	require.Equal(t, "billing", p.Name)
	require.Equal(t, bustype.OrderingKey, p.Ordering)
	require.Equal(t, p, riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "billing", Ordering: bustype.OrderingKey}))

	rec := &recordingTB{TB: t}
	require.Nil(t, riverbustest.CreatePool(rec, db, bustype.PoolParams{Name: "billing", MaxAttempts: 3}))
	require.Nil(t, riverbustest.CreatePool(rec, db, bustype.PoolParams{Name: "Not A Name"}))
	require.Len(t, rec.failures, 2)
	require.Contains(t, rec.failures[0], `riverbustest: create pool "billing"`)
	require.Contains(t, rec.failures[1], `riverbustest: create pool "Not A Name"`)
}

func TestWaitForSequenceWaitsForTheHandler(t *testing.T) {
	t.Parallel()
	db := riverbustest.NewDatabase(t)
	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "billing"})

	w := &billingWorker{}
	ws := workers.NewRegistry()
	workers.Add(ws, w, nil)
	client := riverbustest.StartClient(t, db, &riverbus.Config{Workers: ws})

	var last int64
	for range 3 {
		last = appendEvent(t, db)
	}
	riverbustest.WaitForSequence(t, client, "billing", last, 30*time.Second)
	w.mu.Lock()
	defer w.mu.Unlock()
	require.ElementsMatch(t, []int64{1, 2, 3}, w.seen, "every job up to the sequence is finished")
}

// A wait that times out says where the pool stands and what holds it: here
// a job no worker runs.
func TestWaitForSequenceSaysWhatHoldsThePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	client := riverbustest.StartClient(t, db, nil) // the fan-out, no workers
	_, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	seq := appendEvent(t, db)

	testwait.Eventually(t, 30*time.Second, func() bool {
		st, err := client.Status(ctx)
		require.NoError(t, err)
		p := st.Pool("billing")
		return p != nil && p.Holder != nil
	}, "the fan-out made no job")

	rec := &recordingTB{TB: t}
	riverbustest.WaitForSequence(rec, client, "billing", seq, 100*time.Millisecond)
	require.Len(t, rec.failures, 1)
	require.Contains(t, rec.failures[0], `pool "billing" did not reach sequence 1 within 100ms: horizon 1, cursor 1, checkpoint 0; held by job`)
	require.Contains(t, rec.failures[0], `(event 1, available, attempt 0/25) never worked: does a started Client have a worker for pool "billing"?`)

	rec = &recordingTB{TB: t}
	riverbustest.WaitForSequence(rec, client, "nope", seq, time.Second)
	require.Len(t, rec.failures, 1)
	require.Contains(t, rec.failures[0], `wait for pool "nope" to reach sequence 1: `)
	require.Contains(t, rec.failures[0], "billing", "the error lists the pools that exist")
}
