package deadletters_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/workers"
)

// paymentArgs are the args of pool "payments".
type paymentArgs struct{ workers.Args }

func (paymentArgs) Kind() string { return "payments" }

// flakyWorker fails every attempt while broken, and records the sequences it
// handled successfully in order.
type flakyWorker struct {
	river.WorkerDefaults[paymentArgs]
	broken atomic.Bool
	mu     sync.Mutex
	done   []int64
}

func (w *flakyWorker) Work(_ context.Context, job *river.Job[paymentArgs]) error {
	if w.broken.Load() {
		return fmt.Errorf("payment provider down for event %d", job.Args.GlobalSequence)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = append(w.done, job.Args.GlobalSequence)
	return nil
}

func (w *flakyWorker) handled() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int64(nil), w.done...)
}

func waitDeadLetters(t *testing.T, db *pgxpool.Pool, pool string, n int) []bustype.DeadLetter {
	t.Helper()
	var dls []bustype.DeadLetter
	testwait.Eventually(t, 30*time.Second, func() bool {
		dls = listDeadLetters(t, db, pool)
		return len(dls) == n
	}, "%d dead letters in pool %s (have %d)", n, pool, len(dls))
	return dls
}

// A job failing every attempt ends as a dead letter; retried while its
// river_job row is still there, it is worked again.
func TestDeadLetterRetryJobPresent(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "payments", "payments", 2)
	w := &flakyWorker{}
	w.broken.Store(true)
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	jobtest.StartClient(t, bundle.db, ws, map[string]int{"payments": 2}, nil)

	ev := jobtest.Event(41, "payment.requested", `{"cents": 500}`)
	ids := jobtest.InsertEvents(t, bundle.db, "payments", ev)
	dls := waitDeadLetters(t, bundle.db, "payments", 1)
	d := dls[0]
	require.Len(t, d.Errors, 2)
	require.Equal(t, 1, d.Errors[0].Attempt)
	require.Equal(t, 2, d.Errors[1].Attempt)
	require.Equal(t, "payment provider down for event 41", d.Errors[1].Error)
	require.False(t, d.DiscardedAt.IsZero())
	argsWant, err := json.Marshal(workers.Args{Event: ev})
	require.NoError(t, err)
	require.JSONEq(t, string(argsWant), string(d.Args))
	d.Errors, d.DiscardedAt, d.Args = nil, time.Time{}, nil
	require.Equal(t, bustype.DeadLetter{
		JobID: ids[0], Pool: "payments", Queue: "payments", GlobalSequence: 41,
		EventType: "payment.requested", EventKey: "key-41",
		Attempt: 2, MaxAttempts: 2, Priority: 1,
		LastError: "payment provider down for event 41",
		JobExists: true, JobState: bustype.JobStateDiscarded,
	}, d)
	require.Empty(t, w.handled(), "never completed")

	w.broken.Store(false)
	res, err := deadletters.Retry(ctx, bundle.db, ids[0])
	require.NoError(t, err)
	require.Equal(t, bustype.DeadLetterRetryResult{DeadJobID: ids[0], JobID: ids[0], Action: bustype.RetryRequeued}, res)

	j := jobtest.WaitJobState(t, bundle.db, ids[0], "completed")
	// As River's JobRetry: one more attempt, errors kept.
	require.Equal(t, jobtest.Job{State: "completed", Attempt: 3, MaxAttempts: 3, Errors: 2}, j)
	require.Equal(t, []int64{41}, w.handled())
	require.Empty(t, listDeadLetters(t, bundle.db, "payments"))

	_, err = deadletters.Retry(ctx, bundle.db, ids[0])
	require.ErrorIs(t, err, bustype.ErrDeadLetterNotFound)
	require.EqualError(t, err, fmt.Sprintf("retry dead letter %d: dead letter not found", ids[0]))
}

// A dead letter outlives River's job cleaner; retried after the cleaner
// deleted its job, it is inserted again and worked. This runs River's real
// cleaner: a client started with a tiny DiscardedJobRetentionPeriod cleans on
// its first maintenance tick once it is leader (River's cleaner interval, 30s,
// is not configurable, so the cleaning client is started after the job was
// discarded).
func TestDeadLetterRetryAfterRiverCleaner(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "payments", "payments", 2)
	w := &flakyWorker{}
	w.broken.Store(true)
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	first := jobtest.StartClient(t, bundle.db, ws, map[string]int{"payments": 2}, nil)

	ids := jobtest.InsertEvents(t, bundle.db, "payments", jobtest.Event(7, "payment.requested", `{"cents": 500}`))
	waitDeadLetters(t, bundle.db, "payments", 1)
	jobtest.StopClient(t, first) // gives up leadership

	jobtest.StartClient(t, bundle.db, ws, map[string]int{"payments": 2}, &workers.RiverOpts{Config: workers.Config{DiscardedJobRetentionPeriod: time.Millisecond}})
	testwait.Eventually(t, 30*time.Second, func() bool {
		_, exists := jobtest.GetJob(t, bundle.db, ids[0])
		return !exists
	}, "River's cleaner deleting job %d", ids[0])

	dls := listDeadLetters(t, bundle.db, "payments")
	require.Len(t, dls, 1)
	require.Equal(t, ids[0], dls[0].JobID)
	require.Equal(t, int64(7), dls[0].GlobalSequence)
	require.False(t, dls[0].JobExists)
	require.Equal(t, bustype.JobState(""), dls[0].JobState)
	require.Equal(t, "payment provider down for event 7", dls[0].LastError)

	w.broken.Store(false)
	res, err := deadletters.Retry(ctx, bundle.db, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids[0], res.DeadJobID)
	require.Equal(t, bustype.RetryReinserted, res.Action)
	require.Greater(t, res.JobID, ids[0])

	j := jobtest.WaitJobState(t, bundle.db, res.JobID, "completed")
	require.Equal(t, jobtest.Job{State: "completed", Attempt: 1, MaxAttempts: 2, Errors: 0}, j)
	require.Equal(t, []int64{7}, w.handled())
	require.Empty(t, listDeadLetters(t, bundle.db, "payments"))

	var retryOf int64
	require.NoError(t, bundle.db.QueryRow(ctx, `SELECT (metadata->>'riverbus_retry_of')::bigint FROM river_job WHERE id = $1`, res.JobID).Scan(&retryOf))
	require.Equal(t, ids[0], retryOf)
}

// RetryDeadLetters replays a pool's dead letters in global sequence order,
// whether their job rows are still there or were deleted (here by a DELETE
// as River's cleaner does it), and a single worker observes that order.
func TestRetryDeadLettersOrder(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "payments", "payments", 1)
	w := &flakyWorker{}
	w.broken.Store(true)
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	jobtest.StartClient(t, bundle.db, ws, map[string]int{"payments": 1}, nil)

	// Job ids are deliberately not in sequence order.
	seqs := []int64{5, 3, 1, 4, 2}
	var ids []int64
	for _, seq := range seqs {
		ids = append(ids, jobtest.InsertEvents(t, bundle.db, "payments", jobtest.Event(seq, "payment.requested", `{}`))...)
	}
	idOf := make(map[int64]int64)
	for i, seq := range seqs {
		idOf[seq] = ids[i]
	}
	dls := waitDeadLetters(t, bundle.db, "payments", 5)
	require.Equal(t, deadLetterIDs(dls), ids, "listed by job id")

	// River's cleaner deleted two of them already.
	_, err := bundle.db.Exec(ctx, `DELETE FROM river_job WHERE id = ANY($1)`, []int64{idOf[3], idOf[1]})
	require.NoError(t, err)

	w.broken.Store(false)
	res, err := deadletters.RetryPool(ctx, bundle.db, "payments")
	require.NoError(t, err)
	require.Len(t, res, 5)
	wantActions := []bustype.RetryAction{bustype.RetryReinserted, bustype.RetryRequeued, bustype.RetryReinserted, bustype.RetryRequeued, bustype.RetryRequeued}
	for i, r := range res {
		seq := int64(i + 1)
		require.Equal(t, idOf[seq], r.DeadJobID, "result %d", i)
		require.Equal(t, wantActions[i], r.Action, "result %d", i)
		if r.Action == bustype.RetryRequeued {
			require.Equal(t, r.DeadJobID, r.JobID)
		}
	}

	testwait.Eventually(t, 30*time.Second, func() bool { return len(w.handled()) == 5 }, "5 events handled (have %v)", w.handled())
	require.Equal(t, []int64{1, 2, 3, 4, 5}, w.handled())
	require.Empty(t, listDeadLetters(t, bundle.db, "payments"))
	for _, r := range res {
		jobtest.WaitJobState(t, bundle.db, r.JobID, "completed")
	}

	res, err = deadletters.RetryPool(ctx, bundle.db, "payments")
	require.NoError(t, err)
	require.Empty(t, res)
}

// invoice is the data of an "invoice.paid" event.
type invoice struct {
	Invoice string `json:"invoice"`
	Cents   int    `json:"cents"`
}

// invoiceArgs are the args of pool "invoices".
type invoiceArgs struct{ workers.Args }

func (invoiceArgs) Kind() string { return "invoices" }

// A poison event — data the handler cannot decode — is retried and ends as
// a dead letter; it is never completed.
func TestPoisonEventBecomesDeadLetter(t *testing.T) {
	t.Parallel()
	_, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "invoices", "invoices", 3)
	var handled, attempts atomic.Int32
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(_ context.Context, job *river.Job[invoiceArgs]) error {
		attempts.Add(1)
		if _, err := workers.Decode[invoice](job.Args.Event); err != nil {
			return err
		}
		handled.Add(1)
		return nil
	}))
	jobtest.StartClient(t, bundle.db, ws, map[string]int{"invoices": 2}, nil)

	poison := jobtest.Event(9, "invoice.paid", `{"invoice": "inv-9", "cents": "twelve"}`)
	ids := jobtest.InsertEvents(t, bundle.db, "invoices", jobtest.Event(8, "invoice.paid", `{"invoice": "inv-8", "cents": 800}`), poison)

	dls := waitDeadLetters(t, bundle.db, "invoices", 1)
	_, wantErr := workers.Decode[invoice](poison)
	require.Error(t, wantErr)
	require.Equal(t, ids[1], dls[0].JobID)
	require.Equal(t, int64(9), dls[0].GlobalSequence)
	require.Equal(t, 3, dls[0].Attempt)
	require.Equal(t, wantErr.Error(), dls[0].LastError)
	require.Equal(t, jobtest.Job{State: "discarded", Attempt: 3, MaxAttempts: 3, Errors: 3}, jobtest.WaitJobState(t, bundle.db, ids[1], "discarded"))
	require.Equal(t, "completed", jobtest.WaitJobState(t, bundle.db, ids[0], "completed").State)
	require.Equal(t, int32(1), handled.Load(), "only the good event was handled")
	require.Equal(t, int32(4), attempts.Load())
}

// insertDiscarded inserts a discarded pool job directly, as River leaves it
// after the last attempt, which the trigger copies into
// riverbus_dead_letter.
func insertDiscarded(t *testing.T, db *pgxpool.Pool, pool string, seq int64) int64 {
	t.Helper()
	args, err := json.Marshal(workers.Args{Event: jobtest.Event(seq, "thing.failed", `{}`)})
	require.NoError(t, err)
	var id int64
	err = db.QueryRow(context.Background(), `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, attempt, finalized_at, errors)
		VALUES ($1, $2, 1, 1, $2, 'discarded', 1, now(), ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'boom ' || $3::text, 'trace', '')])
		RETURNING id`, args, pool, fmt.Sprint(seq)).Scan(&id)
	require.NoError(t, err)
	return id
}

// insertTwoPoolsOfDeadLetters creates pools pa and pb and inserts, in this
// order (so with growing job ids), the dead letters of pa's event 1, pb's
// event 1, pa's events 2 and 3.
func insertTwoPoolsOfDeadLetters(t *testing.T, db *pgxpool.Pool) (a1, b1, a2, a3 int64) {
	t.Helper()
	jobtest.CreatePool(t, db, "pa", "pa", 1)
	jobtest.CreatePool(t, db, "pb", "pb", 1)
	a1 = insertDiscarded(t, db, "pa", 1)
	b1 = insertDiscarded(t, db, "pb", 1)
	a2 = insertDiscarded(t, db, "pa", 2)
	a3 = insertDiscarded(t, db, "pa", 3)
	return a1, b1, a2, a3
}

func TestListDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	a1, b1, a2, a3 := insertTwoPoolsOfDeadLetters(t, bundle.db)

	all, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{})
	require.NoError(t, err)
	require.Equal(t, []int64{a1, b1, a2, a3}, deadLetterIDs(all))
	require.Equal(t, "boom 1", all[0].LastError)
	require.Equal(t, "thing.failed", all[0].EventType)

	page1, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "pa", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int64{a1, a2}, deadLetterIDs(page1))
	page2, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "pa", Limit: 2, AfterJobID: page1[1].JobID})
	require.NoError(t, err)
	require.Equal(t, []int64{a3}, deadLetterIDs(page2))

	none, err := deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Pool: "nope"})
	require.NoError(t, err)
	require.Empty(t, none)

	_, err = deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Limit: -1})
	require.EqualError(t, err, "Limit must be between 1 and 10000, got -1")
	_, err = deadletters.List(ctx, bundle.db, bustype.DeadLetterListParams{Limit: 10_001})
	require.EqualError(t, err, "Limit must be between 1 and 10000, got 10001")
}

func TestPurgeDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	a1, b1, a2, a3 := insertTwoPoolsOfDeadLetters(t, bundle.db)
	// a2's job row is already gone.
	_, err := bundle.db.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, a2)
	require.NoError(t, err)

	require.NoError(t, deadletters.Purge(ctx, bundle.db, a1))
	_, exists := jobtest.GetJob(t, bundle.db, a1)
	require.False(t, exists, "the discarded job goes too")
	err = deadletters.Purge(ctx, bundle.db, a1)
	require.ErrorIs(t, err, bustype.ErrDeadLetterNotFound)

	n, err := deadletters.PurgePool(ctx, bundle.db, "pa")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, exists = jobtest.GetJob(t, bundle.db, a3)
	require.False(t, exists)
	require.Equal(t, []int64{b1}, deadLetterIDs(listDeadLetters(t, bundle.db, "")))
	_, exists = jobtest.GetJob(t, bundle.db, b1)
	require.True(t, exists)

	n, err = deadletters.PurgePool(ctx, bundle.db, "pa")
	require.NoError(t, err)
	require.Equal(t, 0, n)
}

// A dead letter whose job was retried outside riverbus (River UI) is left
// alone on retry and its stale copy removed.
func TestRetryDeadLetterAlreadyRetried(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "pa", "pa", 1)
	id := insertDiscarded(t, bundle.db, "pa", 1)
	_, err := bundle.db.Exec(ctx, `UPDATE river_job SET state = 'completed' WHERE id = $1`, id)
	require.NoError(t, err)

	dls := listDeadLetters(t, bundle.db, "pa")
	require.Len(t, dls, 1)
	require.Equal(t, bustype.JobStateCompleted, dls[0].JobState)

	res, err := deadletters.Retry(ctx, bundle.db, id)
	require.NoError(t, err)
	require.Equal(t, bustype.DeadLetterRetryResult{DeadJobID: id, JobID: id, Action: bustype.RetryAlreadyRetried}, res)
	j, _ := jobtest.GetJob(t, bundle.db, id)
	require.Equal(t, "completed", j.State)
	require.Empty(t, listDeadLetters(t, bundle.db, "pa"))
}

// Retrying notifies River's producers of the job's queue on commit, on the
// topic and with the payload River's own inserts use. The job row's queue
// (moved since it was discarded) wins over the dead letter's copy.
func TestRetryDeadLetterNotifiesRiver(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "pa", "queue_a", 1)
	id := insertDiscarded(t, bundle.db, "pa", 1)
	_, err := bundle.db.Exec(ctx, `UPDATE river_job SET queue = 'queue_a' WHERE id = $1`, id)
	require.NoError(t, err)

	conn, err := bundle.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN "public.river_insert"`)
	require.NoError(t, err)

	_, err = deadletters.Retry(ctx, bundle.db, id)
	require.NoError(t, err)

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(waitCtx)
	require.NoError(t, err)
	require.Equal(t, "public.river_insert", n.Channel)
	var payload struct {
		Queue string `json:"queue"`
	}
	require.NoError(t, json.Unmarshal([]byte(n.Payload), &payload))
	require.Equal(t, "queue_a", payload.Queue)
}

// A dead letter that River puts back to work (River UI's retry button,
// Client.JobRetry) is no longer one: migration 009 removes it, so neither
// `dlq list` nor a blocked key keeps waiting for it. Discarded again, it is
// a dead letter again.
func TestRiverJobRetryRemovesDeadLetter(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	jobtest.CreatePool(t, bundle.db, "pa", "pa", 1)
	id := insertDiscarded(t, bundle.db, "pa", 1)
	require.Len(t, listDeadLetters(t, bundle.db, "pa"), 1)

	job, err := bundle.client.JobRetry(ctx, id)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, job.State)
	require.Empty(t, listDeadLetters(t, bundle.db, "pa"))

	_, err = bundle.db.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, deadLetterIDs(listDeadLetters(t, bundle.db, "pa")))
}

// `dlq retry` and `dlq purge` lock a job before its dead letter, as River
// UI's retry does (River locks the job; the trigger of migration 009 then
// deletes the dead letter): racing each other they wait, never deadlock.
func TestDeadLetterRetryAndPurgeRaceRiverJobRetry(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"retry", "purge"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			ctx, bundle := setup(t)
			jobtest.CreatePool(t, bundle.db, "pa", "pa", 1)
			id := insertDiscarded(t, bundle.db, "pa", 1)

			// River UI's retry, held after it locked the job row.
			tx, err := bundle.db.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			_, err = tx.Exec(ctx, `SELECT 1 FROM river_job WHERE id = $1 FOR UPDATE`, id)
			require.NoError(t, err)

			done := make(chan error, 1)
			go func() {
				if op == "retry" {
					_, err := deadletters.Retry(ctx, bundle.db, id)
					done <- err
				} else {
					done <- deadletters.Purge(ctx, bundle.db, id)
				}
			}()
			testwait.Eventually(t, 10*time.Second, func() bool {
				var waiting int
				require.NoError(t, bundle.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
				return waiting > 0
			}, "dlq %s waits for the job's lock", op)

			job, err := bundle.client.JobRetryTx(ctx, tx, id)
			require.NoError(t, err, "River's retry")
			require.Equal(t, rivertype.JobStateAvailable, job.State)
			require.NoError(t, tx.Commit(ctx))
			require.ErrorIs(t, <-done, bustype.ErrDeadLetterNotFound, "the dead letter was retried by River first")
			j, exists := jobtest.GetJob(t, bundle.db, id)
			require.True(t, exists)
			require.Equal(t, "available", j.State)
			require.Empty(t, listDeadLetters(t, bundle.db, "pa"))
		})
	}
}
