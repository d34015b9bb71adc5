package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// poolJobArgs is a pool job as the fan-out writes it: kind = pool name, args
// = the event envelope. Workers use fixed-kind types with the same JSON.
type poolJobArgs struct {
	workers.Args
	pool string
}

func (a poolJobArgs) Kind() string { return a.pool }

// createPool inserts a pool row the way the fan-out's CreatePool would.
func createPool(t testing.TB, db *pgxpool.Pool, name, queue string, maxAttempts int) {
	t.Helper()
	_, err := db.Exec(context.Background(),
		`INSERT INTO riverbus_pool (name, queue, max_attempts, start_after, cursor_seq) VALUES ($1, $2, $3, 0, 0)`,
		name, queue, maxAttempts)
	require.NoError(t, err)
}

func event(seq int64, typ, data string) outbox.Event {
	return outbox.Event{
		GlobalSequence: seq,
		Type:           typ,
		Key:            fmt.Sprintf("key-%d", seq),
		Tags:           []string{},
		Data:           json.RawMessage(data),
		Metadata:       json.RawMessage(`{}`),
		OccurredAt:     time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// insertEvents inserts one job of pool per event, with the pool's queue,
// max attempts and priority, the way the fan-out does, and returns the ids.
func insertEvents(t testing.TB, db *pgxpool.Pool, pool string, events ...outbox.Event) []int64 {
	t.Helper()
	ctx := context.Background()
	var (
		queue       string
		maxAttempts int
		priority    int
	)
	require.NoError(t, db.QueryRow(ctx, `SELECT queue, max_attempts, priority FROM riverbus_pool WHERE name = $1`, pool).
		Scan(&queue, &maxAttempts, &priority))
	inserter, err := river.NewClient(riverpgxv5.New(db), &river.Config{Logger: discardLogger})
	require.NoError(t, err)
	params := make([]river.InsertManyParams, len(events))
	for i, ev := range events {
		params[i] = river.InsertManyParams{
			Args:       poolJobArgs{pool: pool, Args: workers.Args{Event: ev}},
			InsertOpts: &river.InsertOpts{Queue: queue, MaxAttempts: maxAttempts, Priority: priority},
		}
	}
	res, err := inserter.InsertMany(ctx, params)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

var discardLogger = slog.New(slog.DiscardHandler)

// soonRetry retries a failed job at once instead of River's backoff.
type soonRetry struct{}

func (soonRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Millisecond) }

// startClient starts a River client built by workers.ClientConfig, with
// immediate retries, stopped when the test ends.
func startClient(t testing.TB, db *pgxpool.Pool, ws *river.Workers, queues map[string]int, opts *workers.ClientOpts) *river.Client[pgx.Tx] {
	t.Helper()
	o := workers.ClientOpts{}
	if opts != nil {
		o = *opts
	}
	o.Queues, o.Workers, o.Logger = queues, ws, discardLogger
	cfg, err := workers.ClientConfig(o)
	require.NoError(t, err)
	cfg.TestOnly = true
	cfg.RetryPolicy = soonRetry{}
	client, err := river.NewClient(riverpgxv5.New(db), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { stopClient(t, client) })
	return client
}

func stopClient(t testing.TB, client *river.Client[pgx.Tx]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(ctx))
}

// eventually waits for cond with a deadline, polling every 10ms.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, fmt.Sprintf(msg, args...))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type jobRow struct {
	State       string
	Attempt     int
	MaxAttempts int
	Errors      int
}

// getJob returns the job's row, or false when it does not exist.
func getJob(t testing.TB, db *pgxpool.Pool, id int64) (jobRow, bool) {
	t.Helper()
	var j jobRow
	err := db.QueryRow(context.Background(),
		`SELECT state::text, attempt, max_attempts, coalesce(array_length(errors, 1), 0) FROM river_job WHERE id = $1`, id).
		Scan(&j.State, &j.Attempt, &j.MaxAttempts, &j.Errors)
	if err == pgx.ErrNoRows {
		return j, false
	}
	require.NoError(t, err)
	return j, true
}

func waitJobState(t testing.TB, db *pgxpool.Pool, id int64, state string) jobRow {
	t.Helper()
	var j jobRow
	eventually(t, 20*time.Second, func() bool {
		var ok bool
		j, ok = getJob(t, db, id)
		return ok && j.State == state
	}, "job %d %s (now %+v)", id, state, &j)
	return j
}

func listDeadLetters(t testing.TB, db *pgxpool.Pool, pool string) []workers.DeadLetter {
	t.Helper()
	dls, err := workers.ListDeadLetters(context.Background(), db, workers.DeadLetterListParams{Pool: pool})
	require.NoError(t, err)
	return dls
}

func deadLetterIDs(dls []workers.DeadLetter) []int64 {
	ids := make([]int64, len(dls))
	for i, d := range dls {
		ids[i] = d.JobID
	}
	return slices.Sorted(slices.Values(ids))
}

// exampleTB lets an Example get a test database from pgtest, which wants a
// testing.TB: it turns failures into panics and runs cleanups on done.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                           {}
func (e *exampleTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (e *exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleTB) Cleanup(f func())                  { e.cleanups = append(e.cleanups, f) }

func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// exampleDB returns a fresh migrated database for an Example, and a function
// that drops it.
func exampleDB() (*pgxpool.Pool, func()) {
	tb := &exampleTB{}
	return pgtest.NewPool(tb), tb.done
}
