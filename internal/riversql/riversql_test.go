package riversql_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/riversql"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// What to check again in River's source when go.mod moves to another
// River: what this package copies of it.
const recheck = `check riversql against the new River, then set RiverVersion:
  - the insert notification: River's notifier topic (internal/notifier, NotificationTopicInsert),
    its payload (Client.maybeNotifyInsertForQueues), the channel its Listener LISTENs on
    (riverpgxv5 Listener.Connect/Listen): NotifyInsert, and riverbus_release_lanes in
    migrations/sql/current/03_lanes.sql (the current text; regenerate schema.sql);
  - river_job's columns and defaults (riverpgxv5/migration/main) and River's bulk insert
    (riverpgxv5 JobInsertFastManyNoReturning): JobColumnList, JobRow;
  - river_queue and River's QueueCreateOrSetUpdatedAt: QueueEnsure;
  - River's JobRetry (riverpgxv5/internal/dbsqlc/river_job.sql): JobRetryDiscarded;
  - the SQL that reads or updates river_job elsewhere (its states and columns): the
    queries.go of internal/lanes, internal/deadletters, checkpoint,
    internal/pools and the root package, workers/exactlyonce.go`

// The River in go.mod is the one this package was written against.
func TestRiverVersion(t *testing.T) {
	t.Parallel()
	// Test binaries carry no dependencies in their build information: the
	// module's go.mod says which River the build uses.
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(gomod), "module github.com/riverbus/riverbus\n")
	require.NotRegexp(t, `(?m)^replace .*riverqueue|^\s+github.com/riverqueue/\S+ =>`, string(gomod), "River is replaced: %s", recheck)
	req := regexp.MustCompile(`(?m)^\s*(github\.com/riverqueue/river(?:/riverdriver|/riverdriver/riverpgxv5|/rivertype|/rivershared)?) (v\S+)`)
	found := map[string]string{}
	for _, m := range req.FindAllStringSubmatch(string(gomod), -1) {
		found[m[1]] = m[2]
	}
	require.Contains(t, found, "github.com/riverqueue/river")
	require.Contains(t, found, "github.com/riverqueue/river/riverdriver/riverpgxv5")
	for path, v := range found {
		require.Equal(t, riversql.RiverVersion, v, "go.mod requires %s %s, riversql was written for River %s: %s",
			path, v, riversql.RiverVersion, recheck)
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if _, ok := found[dep.Path]; ok {
				require.Equal(t, riversql.RiverVersion, dep.Version, "%s in the build: %s", dep.Path, recheck)
			}
		}
	}
}

type testBundle struct {
	db    *pgxpool.Pool
	river *river.Client[pgx.Tx]
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := pgtest.NewPool(t)
	client, err := river.NewClient(riverpgxv5.New(db), &river.Config{})
	require.NoError(t, err)
	return &testBundle{db: db, river: client}
}

// listen returns River's own listener of its insert topic, as River's
// producers use it: whatever it receives, they receive.
func listen(t *testing.T, db *pgxpool.Pool, afterConnect string) riverdriver.Listener {
	t.Helper()
	ctx := context.Background()
	l := riverpgxv5.New(db).GetListener(&riverdriver.GetListenenerParams{})
	if afterConnect != "" {
		l.SetAfterConnectExec(afterConnect)
	}
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(ctx) })
	require.NoError(t, l.Listen(ctx, "river_insert"))
	return l
}

func next(t *testing.T, l riverdriver.Listener) *riverdriver.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := l.WaitForNotification(ctx)
	require.NoError(t, err, "no insert notification on River's channel")
	return n
}

type testArgs struct {
	N int `json:"n"`
}

func (testArgs) Kind() string { return "riversql_test" }

// A job inserted by CopyJobs is the row River's own bulk insert writes for
// the same job, and NotifyInsertQueues sends the notification River sends,
// on the channel River's producers listen on.
func TestCopyJobsAndNotifyAreRiversInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	l := listen(t, b.db, "")
	metadata := []byte(`{"riverbus_lane": "k"}`)

	// River's insert.
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	_, err = b.river.InsertManyFastTx(ctx, tx, []river.InsertManyParams{{Args: testArgs{N: 1},
		InsertOpts: &river.InsertOpts{Queue: "q", MaxAttempts: 7, Priority: 3, Metadata: metadata}}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	riverNote := next(t, l)

	// Ours.
	args, err := json.Marshal(testArgs{N: 1})
	require.NoError(t, err)
	tx, err = b.db.Begin(ctx)
	require.NoError(t, err)
	n, err := riversql.CopyJobs(ctx, tx, 1, func(int) riversql.JobRow {
		return riversql.JobRow{Args: args, Kind: testArgs{}.Kind(), MaxAttempts: 7, Metadata: metadata, Priority: 3,
			Queue: "q", State: "available"}
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	var sent int64
	require.NoError(t, tx.QueryRow(ctx, riversql.NotifyInsertQueues, []string{"q"}).Scan(&sent))
	require.Equal(t, int64(1), sent)
	require.NoError(t, tx.Commit(ctx))
	ourNote := next(t, l)

	require.Equal(t, riverNote.Topic, ourNote.Topic)
	require.Equal(t, "river_insert", ourNote.Topic)
	require.JSONEq(t, riverNote.Payload, ourNote.Payload)
	require.JSONEq(t, `{"queue": "q"}`, ourNote.Payload)

	// The rows are the same but for the id and the timestamps, which
	// River takes from this host's clock and riverbus from the database's.
	rows, err := b.db.Query(ctx, `SELECT to_jsonb(j) - 'id' - 'created_at' - 'scheduled_at',
		created_at IS NOT NULL AND scheduled_at IS NOT NULL FROM river_job j ORDER BY id`)
	require.NoError(t, err)
	var got []string
	var row string
	var times bool
	_, err = pgx.ForEachRow(rows, []any{&row, &times}, func() error {
		require.True(t, times)
		got = append(got, row)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.JSONEq(t, got[0], got[1], "River's job row, then riverbus's")
}

// With no current schema (an empty search_path), River's producers listen
// on the bare topic, and that is where NotifyInsert sends.
func TestNotifyInsertWithoutCurrentSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	l := listen(t, b.db, `SET search_path = ''`)
	require.Empty(t, l.Schema())
	conn, err := b.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET search_path = ''`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, `RESET search_path`) }()
	_, err = conn.Exec(ctx, riversql.NotifyInsertQueues, []string{"q"})
	require.NoError(t, err)
	n := next(t, l)
	require.Equal(t, "river_insert", n.Topic)
	require.JSONEq(t, `{"queue": "q"}`, n.Payload)
}

// JobRetryDiscarded does to a discarded job what River's JobRetry does.
func TestJobRetryDiscardedIsRiversJobRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Two discarded jobs alike but for their ids (one statement: one now()).
	rows, err := b.db.Query(ctx, `INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue,
		state, attempt, attempted_at, attempted_by, errors, finalized_at)
		SELECT '{"n": 1}', 'riversql_test', 2, '{"cancel_attempted_at": "2026-01-01T00:00:00Z", "x": 1}', 2, 'q',
			'discarded', 2, now(), '{host}', ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 2, "error": "boom", "trace": ""}'::jsonb],
			now()
		FROM generate_series(1, 2) RETURNING id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	_, err = b.river.JobRetry(ctx, ids[0])
	require.NoError(t, err)
	rows, err = b.db.Query(ctx, riversql.JobRetryDiscarded, []int64{ids[1]}, []int32{0})
	require.NoError(t, err)
	retried, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, retried)

	var riverRow, ourRow string
	const row = `SELECT to_jsonb(j) - 'id' - 'scheduled_at' FROM river_job j WHERE id = $1`
	require.NoError(t, b.db.QueryRow(ctx, row, ids[0]).Scan(&riverRow))
	require.NoError(t, b.db.QueryRow(ctx, row, ids[1]).Scan(&ourRow))
	require.JSONEq(t, riverRow, ourRow)
	require.Contains(t, ourRow, `"state": "available"`)
}

// QueueEnsure writes the row River's producer writes when it starts, and
// leaves an existing row alone.
func TestQueueEnsureIsRiversQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[testArgs]) error { return nil }))
	client, err := river.NewClient(riverpgxv5.New(b.db), &river.Config{
		Queues:  map[string]river.QueueConfig{"q-river": {MaxWorkers: 1}},
		Workers: workers,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})
	testwait.Eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM river_queue WHERE name = 'q-river'`).Scan(&n))
		return n == 1
	}, "River's producer did not create its queue row")

	_, err = b.db.Exec(ctx, riversql.QueueEnsure, "q-ours")
	require.NoError(t, err)
	var riverRow, ourRow string
	const row = `SELECT to_jsonb(q) - 'name' - 'created_at' - 'updated_at' FROM river_queue q WHERE name = $1`
	require.NoError(t, b.db.QueryRow(ctx, row, "q-river").Scan(&riverRow))
	require.NoError(t, b.db.QueryRow(ctx, row, "q-ours").Scan(&ourRow))
	require.JSONEq(t, riverRow, ourRow)

	// An existing queue is left as it is: paused stays paused.
	_, err = b.db.Exec(ctx, `UPDATE river_queue SET paused_at = now() WHERE name = 'q-ours'`)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, riversql.QueueEnsure, "q-ours")
	require.NoError(t, err)
	q, err := b.river.QueueGet(ctx, "q-ours")
	require.NoError(t, err)
	require.NotNil(t, q.PausedAt)
}

// The SQL functions that wake River's producers (they cannot use
// NotifyInsert: their text is SQL of its own), as the current texts define
// them and as the shipped migrations did, send the same topic and payload.
func TestMigrationsNotifyAsRiver(t *testing.T) {
	t.Parallel()
	all, err := migrations.All()
	require.NoError(t, err)
	notify := regexp.MustCompile(`pg_notify\(([^;]*?)\)::text\)`)
	// The schema is current_schema() or, in a function pinned to
	// pg_catalog (017), the install schema put in as a literal by format().
	want := regexp.MustCompile(`^pg_notify\((current_schema\(\)|%\d\$L) \|\| '\.river_insert', json_build_object\('queue', \w+\)::text\)$`)
	var found []int
	for _, m := range all {
		for _, call := range notify.FindAllString(m.SQL, -1) {
			if !strings.Contains(call, "river_insert") {
				continue
			}
			require.Regexp(t, want, call, "migration %d", m.Version)
			found = append(found, m.Version)
		}
	}
	require.Equal(t, []int{3, 5, 9, 12, 16, 17}, found, "the migrations that send River's insert notification")
	current, err := filepath.Glob(filepath.Join("..", "..", "migrations", "sql", "current", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, current)
	var sending []string
	for _, path := range current {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, call := range notify.FindAllString(string(text), -1) {
			if strings.Contains(call, "river_insert") {
				require.Regexp(t, want, call, path)
				sending = append(sending, filepath.Base(path))
			}
		}
	}
	require.Equal(t, []string{"03_lanes.sql"}, sending, "the current texts that send River's insert notification")
	require.Contains(t, riversql.NotifyInsert, `'river_insert', json_build_object('queue', queue)::text)`)
}

// PoolName and riverbus_pool's CHECK are one rule: the same expression,
// and the same answer for a name at each boundary.
func TestPoolNameIsTheCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var check string
	require.NoError(t, db.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = 'riverbus_pool'::regclass AND conname = 'riverbus_pool_name_valid'`).Scan(&check))
	require.Equal(t, "CHECK ((name ~ '"+riversql.PoolNamePattern+"'::text)) NOT VALID", check)

	for _, c := range []struct {
		name  string
		valid bool
	}{
		{"", false},
		{"a", false}, // River refuses job kinds of one character
		{"ab", true},
		{"_a", true},
		{"a.b:c-d_e", true},
		{".a", false},
		{"-a", false},
		{":a", false},
		{"a b", false},
		{"a/b", false},
		{"é1", false},
		{strings.Repeat("a", 99), true},
		{strings.Repeat("a", 100), true},
		{strings.Repeat("a", 101), false},
	} {
		require.Equal(t, c.valid, riversql.PoolName.MatchString(c.name), "Go, name %q (%d chars)", c.name, len(c.name))
		_, err := db.Exec(ctx, `INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ($1, 0, 0)`, c.name)
		if c.valid {
			require.NoError(t, err, "SQL, name %q (%d chars)", c.name, len(c.name))
		} else {
			require.Equal(t, pgerrcode.CheckViolation, database.Code(err), "SQL, name %q (%d chars): %v", c.name, len(c.name), err)
		}
	}
}

// An event's envelope is one object whoever builds it: EventEnvelope in
// Go's queries, riverbus_event_envelope in the database (the retry of an
// undeliverable event's dead letter), and outbox.Event, its Go type, has
// exactly its fields.
func TestEnvelopesAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var seq int64
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, tags, data, metadata, occurred_at, version)
		VALUES ('order.placed', 'k1', '{a=1,b=2}', '{"n": 1, "s": "x"}', '{"m": true}', '2026-01-02 03:04:05.678901+00', 3)
		RETURNING global_sequence`).Scan(&seq))
	var goSQL, dbSQL string
	require.NoError(t, db.QueryRow(ctx, `SELECT (`+riversql.EventEnvelope+`)::text, riverbus_event_envelope(ARRAY[e.global_sequence])->>0
		FROM riverbus_event e WHERE e.global_sequence = $1`, seq).Scan(&goSQL, &dbSQL))
	require.JSONEq(t, goSQL, dbSQL, "riversql.EventEnvelope and riverbus_event_envelope")

	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(goSQL), &fields))
	var want []string
	for f := range reflect.TypeFor[outbox.Event]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		want = append(want, name)
	}
	require.ElementsMatch(t, want, slices.Collect(maps.Keys(fields)), "outbox.Event's fields")
	dec := json.NewDecoder(strings.NewReader(goSQL))
	dec.DisallowUnknownFields()
	var e outbox.Event
	require.NoError(t, dec.Decode(&e))
	require.Equal(t, seq, e.GlobalSequence)
	require.Equal(t, "order.placed", e.Type)
	require.Equal(t, "k1", e.Key)
	require.Equal(t, []string{"a=1", "b=2"}, e.Tags)
	require.JSONEq(t, `{"n": 1, "s": "x"}`, string(e.Data))
	require.JSONEq(t, `{"m": true}`, string(e.Metadata))
	require.True(t, e.OccurredAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)), e.OccurredAt)
	require.Equal(t, 3, e.Version)
	require.NotEqual(t, uuid.Nil, e.EventID)
}
