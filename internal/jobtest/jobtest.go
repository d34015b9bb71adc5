// Package jobtest holds the helpers that the tests of the job side share
// (handlers in package workers, dead letters): pools and pool jobs written
// the way the fan-out writes them, a River client built by
// workers.RiverConfig that retries at once, and waiting for a job's state.
// Tests only.
package jobtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// DiscardLogger logs nothing.
var DiscardLogger = slog.New(slog.DiscardHandler)

// poolJobArgs is a pool job as the fan-out writes it: kind = pool name, args
// = the event envelope. Workers use fixed-kind types with the same JSON.
type poolJobArgs struct {
	workers.Args
	pool string
}

func (a poolJobArgs) Kind() string { return a.pool }

// PoolArgs are the args of pool's jobs, for binding a handler to a pool
// chosen at run time (workers.AddArgsSafely).
func PoolArgs(pool string) poolJobArgs { return poolJobArgs{pool: pool} }

// EventOnce is a handler for any pool that records each event in table
// event_once (CreateEventOnceTable), keyed by its event id, inside
// workers.RunExactlyOnce: a retry of its job is applied once, but another
// job for the same event, as a replay makes, fails on the table's key, as a
// projection with a unique key of its own does.
type EventOnce struct {
	river.WorkerDefaults[poolJobArgs]
	DB *pgxpool.Pool
}

func (w *EventOnce) Work(ctx context.Context, job *river.Job[poolJobArgs]) error {
	return workers.RunExactlyOnce(ctx, w.DB, job, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO event_once (event_id) VALUES ($1)`, job.Args.EventID)
		return err
	})
}

// CreateEventOnceTable creates EventOnce's table.
func CreateEventOnceTable(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(context.Background(), `CREATE TABLE event_once (event_id uuid PRIMARY KEY)`)
	require.NoError(t, err)
}

// CreatePool inserts a pool row with its cursor at 0 and no filter.
func CreatePool(t testing.TB, db *pgxpool.Pool, name, queue string, maxAttempts int) {
	t.Helper()
	_, err := db.Exec(context.Background(),
		`INSERT INTO riverbus_pool (name, queue, max_attempts, start_after, cursor_seq) VALUES ($1, $2, $3, 0, 0)`,
		name, queue, maxAttempts)
	require.NoError(t, err)
}

// Event returns an event of sequence seq, type typ, key "key-<seq>" and
// data, as if appended.
func Event(seq int64, typ, data string) outbox.Event {
	return outbox.Event{
		GlobalSequence: seq,
		Type:           typ,
		Key:            fmt.Sprintf("key-%d", seq),
		Tags:           []string{},
		Data:           json.RawMessage(data),
		Metadata:       json.RawMessage(`{}`),
		OccurredAt:     time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Version:        1,
	}
}

// InsertEvents inserts one job of pool per event, with the pool's queue,
// max attempts and priority, the way the fan-out does, and returns the ids.
func InsertEvents(t testing.TB, db *pgxpool.Pool, pool string, events ...outbox.Event) []int64 {
	t.Helper()
	ctx := context.Background()
	var (
		queue       string
		maxAttempts int
		priority    int
	)
	require.NoError(t, db.QueryRow(ctx, `SELECT queue, max_attempts, priority FROM riverbus_pool WHERE name = $1`, pool).
		Scan(&queue, &maxAttempts, &priority))
	inserter, err := river.NewClient(workers.NewDriver(db, DiscardLogger), &river.Config{Logger: DiscardLogger})
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

// soonRetry retries a failed job at once instead of River's backoff.
type soonRetry struct{}

func (soonRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Millisecond) }

// StartClient starts a River client built by workers.RiverConfig from opts
// (nil: the defaults) with queues and ws, with immediate retries, stopped
// when the test ends.
func StartClient(t testing.TB, db *pgxpool.Pool, ws *river.Workers, queues map[string]int, opts *workers.RiverOpts) *river.Client[pgx.Tx] {
	t.Helper()
	o := workers.RiverOpts{}
	if opts != nil {
		o = *opts
	}
	o.Queues, o.Workers, o.Logger = queues, ws, DiscardLogger
	cfg, err := workers.RiverConfig(o)
	require.NoError(t, err)
	cfg.TestOnly = true
	cfg.RetryPolicy = soonRetry{}
	client, err := river.NewClient(workers.NewDriver(db, cfg.Logger), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() { StopClient(t, client) })
	return client
}

// StopClient stops client, waiting up to ten seconds for its jobs.
func StopClient(t testing.TB, client *river.Client[pgx.Tx]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(ctx))
}

// Job is what the tests check of a river_job row.
type Job struct {
	State       string
	Attempt     int
	MaxAttempts int
	Errors      int
}

// GetJob returns the job's row, or false when it does not exist.
func GetJob(t testing.TB, db *pgxpool.Pool, id int64) (Job, bool) {
	t.Helper()
	var j Job
	err := db.QueryRow(context.Background(),
		`SELECT state::text, attempt, max_attempts, coalesce(array_length(errors, 1), 0) FROM river_job WHERE id = $1`, id).
		Scan(&j.State, &j.Attempt, &j.MaxAttempts, &j.Errors)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, false
	}
	require.NoError(t, err)
	return j, true
}

// WaitJobState waits up to 20 seconds for job id to be in state and
// returns its row.
func WaitJobState(t testing.TB, db *pgxpool.Pool, id int64, state string) Job {
	t.Helper()
	var j Job
	testwait.Eventually(t, 20*time.Second, func() bool {
		var ok bool
		j, ok = GetJob(t, db, id)
		return ok && j.State == state
	}, "job %d %s (now %+v)", id, state, &j)
	return j
}

// WaitRetryDelay waits up to 30 seconds until job id has failed failures
// times and waits for its next attempt (retryable), and returns how long
// after the start of its last attempt, as River recorded it in the job's
// errors, that next attempt is scheduled.
func WaitRetryDelay(t testing.TB, db *pgxpool.Pool, id int64, failures int) time.Duration {
	t.Helper()
	var (
		state            string
		errs             int
		scheduled, start time.Time
	)
	testwait.Eventually(t, 30*time.Second, func() bool {
		require.NoError(t, db.QueryRow(context.Background(), `SELECT state, coalesce(array_length(errors, 1), 0), scheduled_at,
			coalesce((errors[array_length(errors, 1)]->>'at')::timestamptz, 'epoch')
			FROM river_job WHERE id = $1`, id).Scan(&state, &errs, &scheduled, &start))
		return state == "retryable" && errs == failures
	}, "job %d: failed %d times and retryable", id, failures)
	return scheduled.Sub(start)
}

// FailLikeDiskFull makes the database refuse, as a full disk does (SQLSTATE
// 53100, "No space left on device"), every UPDATE of table's rows for
// which when holds (a trigger condition on OLD and NEW), from now on: a
// real failure of the statements riverbus and River run, without filling
// a disk. name names the trigger and its function.
func FailLikeDiskFull(t testing.TB, db *pgxpool.Pool, name, table, when string) {
	t.Helper()
	_, err := db.Exec(context.Background(), fmt.Sprintf(`
CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'could not extend file "base/16384/2619": No space left on device' USING ERRCODE = 'disk_full';
END
$$;
CREATE TRIGGER %[1]s BEFORE UPDATE ON %[2]s FOR EACH ROW WHEN (%[3]s) EXECUTE FUNCTION %[1]s();`,
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{table}.Sanitize(), when))
	require.NoError(t, err)
}

// CompletionsOf is the FailLikeDiskFull condition that fails every change
// of a running job of kind out of `running`: River's completer, its
// rescuer and riverbus's lane hand-off cannot finish the kind's jobs, while
// River still fetches them.
func CompletionsOf(kind string) string {
	return fmt.Sprintf(`OLD.state = 'running' AND NEW.state <> 'running' AND NEW.kind = '%s'`, strings.ReplaceAll(kind, "'", "''"))
}
