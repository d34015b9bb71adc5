package webhook_test

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// pool is the pool every test delivers.
const pool = "hooks"

var discardLogger = slog.New(slog.DiscardHandler)

// fastRetry retries a failed job 10ms later instead of River's backoff.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(10 * time.Millisecond) }

type testBundle struct {
	db     *pgxpool.Pool // the owner's
	client *river.Client[pgx.Tx]
	fanout *fanout.Fanout
}

// setupOpts are what tests vary in setupWith.
type setupOpts struct {
	// Pool is pool "hooks" (its Name is set); MaxAttempts zero: 3.
	Pool bustype.PoolParams
	// Webhook is the webhook of the pool (its Pool is set).
	Webhook webhook.Config
	// Queues are more River queues the client works, beside the pool's.
	Queues []string
	// WorkerLogin runs the River client as a riverbus_worker login, as a
	// worker process runs, instead of as the owner.
	WorkerLogin bool
	// RiverLogger receives River's own logs. Nil: discarded.
	RiverLogger *slog.Logger
}

// setup gives a fresh database with pool "hooks" of maxAttempts, a started
// River client from workers.RiverConfig with the webhook of cfg (its Pool
// set to "hooks") and fast retries, and a fan-out to turn events into jobs.
func setup(t *testing.T, maxAttempts int, cfg webhook.Config) *testBundle {
	t.Helper()
	return setupWith(t, setupOpts{Pool: bustype.PoolParams{MaxAttempts: maxAttempts}, Webhook: cfg})
}

func setupWith(t *testing.T, opts setupOpts) *testBundle {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	params := opts.Pool
	params.Name = pool
	params.MaxAttempts = cmp.Or(params.MaxAttempts, 3)
	_, _, err := pools.Create(ctx, db, params)
	require.NoError(t, err)
	workDB := db
	if opts.WorkerLogin {
		workDB = pgtest.Login(t, db, "riverbus_worker")
	}

	ws := river.NewWorkers()
	cfg := opts.Webhook
	cfg.Pool = pool
	if cfg.Logger == nil {
		cfg.Logger = discardLogger
	}
	require.NoError(t, webhook.Register(ws, cfg))
	queues := map[string]int{cmp.Or(params.Queue, bustype.DefaultQueue(pool)): 2}
	for _, q := range opts.Queues {
		queues[q] = 2
	}
	riverLogger := cmp.Or(opts.RiverLogger, discardLogger)
	rc, err := workers.RiverConfig(workers.RiverOpts{Queues: queues, Workers: ws, Config: workers.Config{Logger: riverLogger}})
	require.NoError(t, err)
	rc.RetryPolicy = fastRetry{}
	rc.TestOnly = true
	client, err := river.NewClient(workers.NewDriver(workDB, rc.Logger), rc)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})

	f, err := fanout.New(db, &fanout.Config{Logger: discardLogger})
	require.NoError(t, err)
	return &testBundle{db: db, client: client, fanout: f}
}

// insertEvent appends an event with plain SQL and returns it as stored.
func (b *testBundle) insertEvent(t *testing.T, typ, key, data string) outbox.Event {
	t.Helper()
	var ev outbox.Event
	require.NoError(t, b.db.QueryRow(context.Background(),
		`INSERT INTO riverbus_event (type, key, data) VALUES ($1, $2, $3)
		RETURNING global_sequence, event_id, type, key, tags, data, metadata, occurred_at, version`, typ, key, data).
		Scan(&ev.GlobalSequence, &ev.EventID, &ev.Type, &ev.Key, &ev.Tags, &ev.Data, &ev.Metadata, &ev.OccurredAt, &ev.Version))
	return ev
}

// appendEvent appends an event with plain SQL, fans it out, and returns the
// event as stored and the id of its job in pool "hooks".
func (b *testBundle) appendEvent(t *testing.T, typ, key, data string) (outbox.Event, int64) {
	t.Helper()
	ctx := context.Background()
	ev := b.insertEvent(t, typ, key, data)
	var jobID int64
	testwait.Eventually(t, 10*time.Second, func() bool {
		_, err := b.fanout.Pass(ctx)
		require.NoError(t, err)
		err = b.db.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = $1 AND (args->>'global_sequence')::bigint = $2`,
			pool, ev.GlobalSequence).Scan(&jobID)
		if err == pgx.ErrNoRows {
			return false
		}
		require.NoError(t, err)
		return true
	}, "job of event %d", ev.GlobalSequence)
	return ev, jobID
}

type jobRow struct {
	State   string
	Attempt int
	Errors  []string // error texts, oldest first
	Args    string   // args as stored, jsonb text
}

func getJob(t testing.TB, db *pgxpool.Pool, id int64) jobRow {
	t.Helper()
	var j jobRow
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT state::text, attempt,
			coalesce((SELECT array_agg(e->>'error' ORDER BY n) FROM unnest(errors) WITH ORDINALITY AS u(e, n)), '{}'),
			args::text
		FROM river_job WHERE id = $1`, id).Scan(&j.State, &j.Attempt, &j.Errors, &j.Args))
	return j
}

func waitJobState(t testing.TB, db *pgxpool.Pool, id int64, state rivertype.JobState) jobRow {
	t.Helper()
	var j jobRow
	testwait.Eventually(t, 20*time.Second, func() bool {
		j = getJob(t, db, id)
		return j.State == string(state)
	}, "job %d %s (now %+v)", id, state, &j)
	return j
}

// delivery is one request a receiver got.
type delivery struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// receiver is an httptest server that records every request and answers
// with respond, called with the 1-based number of the request.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []delivery
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rcv := &receiver{}
	rcv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		rcv.got = append(rcv.got, delivery{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		n := len(rcv.got)
		rcv.mu.Unlock()
		respond(n, w, r)
	}))
	t.Cleanup(rcv.Close)
	return rcv
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}
