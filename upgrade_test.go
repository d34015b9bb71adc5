package riverbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// keyedRecorder records, per event key, the sequences its handler ran, in
// the order they ran.
type keyedRecorder struct {
	river.WorkerDefaults[billingArgs]
	mu    sync.Mutex
	byKey map[string][]int64
}

func (w *keyedRecorder) Work(_ context.Context, job *river.Job[billingArgs]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byKey[job.Args.Key] = append(w.byKey[job.Args.Key], job.Args.GlobalSequence)
	return nil
}

func (w *keyedRecorder) seen() map[string][]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]int64{}
	for k, s := range w.byKey {
		out[k] = slices.Clone(s)
	}
	return out
}

func (w *keyedRecorder) count() int {
	n := 0
	for _, s := range w.seen() {
		n += len(s)
	}
	return n
}

// A rolling upgrade of a process that runs the fan-out and workers of an
// ordered pool: a newer build's migrate applies a migration this build may
// not run against. Within seconds the process stops delivering on its own
// (Stopped, Err naming both versions) and no further event becomes a job
// or runs; it cannot start again. A process of the newer build takes over:
// every event runs once, in order per key, none lost.
func TestClientStopsDeliveringWhenTheSchemaNeedsNewerCode(t *testing.T) {
	t.Parallel()
	ctx, b, code := setupUpgrade(t, bustype.OrderingKey)

	start := func(cfg riverbus.Config) (*riverbus.Client, *keyedRecorder) {
		w := &keyedRecorder{byKey: map[string][]int64{}}
		ws := workers.NewRegistry()
		workers.Add(ws, w, nil)
		cfg.Workers = ws
		cfg.Fanout.PollInterval = 50 * time.Millisecond
		client, err := riverbus.NewClient(b.db, &cfg)
		require.NoError(t, err)
		require.NoError(t, client.Start(ctx))
		t.Cleanup(func() { _ = client.Stop(context.Background()) })
		return client, w
	}
	appendSome := func(n int) {
		for i := range n {
			_, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Key: fmt.Sprintf("customer-%d", i%3), Data: json.RawMessage(`{}`)})
			require.NoError(t, err)
		}
	}

	old, oldWork := start(riverbus.Config{})
	appendSome(6)
	testwait.Eventually(t, 30*time.Second, func() bool { return oldWork.count() == 6 }, "the old process delivers before the upgrade")

	require.Equal(t, code+1, pgtest.MigrateNewer(t, b.db))
	waitStopped(t, old)
	want := &migrations.SchemaTooNewError{Schema: code + 1, Needs: code + 1, Code: code}
	require.Equal(t, want, old.Err())
	require.EqualError(t, old.Err(), fmt.Sprintf("riverbus schema version %d is newer than this code knows (%d): replace this process with a build that knows schema version %d",
		code+1, code, code+1))

	appendSome(6)
	testwait.Never(t, time.Second, func() bool { return oldWork.count() > 6 || jobCount(t, b) > 6 },
		"the stopped process delivers nothing more")
	// The old build cannot start again.
	again, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	err = again.Start(ctx)
	var tooNew *migrations.SchemaTooNewError
	require.ErrorAs(t, err, &tooNew)
	require.Equal(t, want, tooNew)

	_, newWork := start(*riverbus.WithSchemaCode(riverbus.Config{}, code+1))
	testwait.Eventually(t, 30*time.Second, func() bool { return newWork.count() == 6 }, "the new process delivers the rest")
	testwait.Never(t, 500*time.Millisecond, func() bool { return newWork.count() > 6 || oldWork.count() > 6 }, "nothing runs twice")
	all := map[string][]int64{}
	for _, w := range []*keyedRecorder{oldWork, newWork} {
		for k, s := range w.seen() {
			all[k] = append(all[k], s...)
		}
	}
	var seqs []int64
	for k, s := range all {
		require.True(t, slices.IsSorted(s), "key %s ran out of order: %v", k, s)
		seqs = append(seqs, s...)
	}
	slices.Sort(seqs)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, seqs)
}

// setupUpgrade is setup with the pool billing, of ordering, and the schema
// version this build knows.
func setupUpgrade(t *testing.T, ordering bustype.Ordering) (context.Context, *testBundle, int) {
	t.Helper()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = admin.PoolCreate(ctx, bustype.PoolParams{Name: "billing", Ordering: ordering})
	require.NoError(t, err)
	return ctx, b, migrations.Newest()
}

// waitStopped requires client to stop on its own within 5 s.
func waitStopped(t *testing.T, client *riverbus.Client) {
	t.Helper()
	select {
	case <-client.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("the old process still runs 5 s after a migration that needs newer code")
	}
}

func jobCount(t *testing.T, b *testBundle) int {
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'billing'`).Scan(&n))
	return n
}

// A process that only works pool jobs (the fan-out runs elsewhere) holds no
// delivering transaction of its own: its watcher stops it within seconds of
// a migration that needs newer code, and the jobs the newer build's fan-out
// then inserts are not run by it.
func TestWorkersStopWhenTheSchemaNeedsNewerCode(t *testing.T) {
	t.Parallel()
	ctx, b, code := setupUpgrade(t, bustype.OrderingNone)

	w := &keyedRecorder{byKey: map[string][]int64{}}
	ws := workers.NewRegistry()
	workers.Add(ws, w, nil)
	old, err := riverbus.NewClient(b.db, &riverbus.Config{Workers: ws, FanoutDisabled: true})
	require.NoError(t, err)
	require.NoError(t, old.Start(ctx))
	t.Cleanup(func() { _ = old.Stop(context.Background()) })

	require.Equal(t, code+1, pgtest.MigrateNewer(t, b.db))
	waitStopped(t, old)
	require.Equal(t, &migrations.SchemaTooNewError{Schema: code + 1, Needs: code + 1, Code: code}, old.Err())

	next, err := riverbus.NewClient(b.db, riverbus.WithSchemaCode(riverbus.Config{Fanout: fanout.Config{PollInterval: 50 * time.Millisecond}}, code+1))
	require.NoError(t, err)
	require.NoError(t, next.Start(ctx))
	t.Cleanup(func() { _ = next.Stop(context.Background()) })
	_, err = outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	testwait.Eventually(t, 10*time.Second, func() bool { return jobCount(t, b) == 1 }, "the new fan-out inserts the job")
	testwait.Never(t, time.Second, func() bool { return w.count() > 0 }, "the stopped workers run no job")
}
