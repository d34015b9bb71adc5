package riverbus_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

type bigPlainArgs struct{ workers.Args }

func (bigPlainArgs) Kind() string { return "big-plain" }

type bigKeyedArgs struct{ workers.Args }

func (bigKeyedArgs) Kind() string { return "big-keyed" }

type bigGroupedArgs struct{ workers.GroupArgs }

func (bigGroupedArgs) Kind() string { return "big-grouped" }

// payloadRecorder records the events its handlers got, whole, by sequence.
type payloadRecorder struct {
	mu     sync.Mutex
	events map[string]map[int64]outbox.Event
	calls  map[string]int
}

func (r *payloadRecorder) add(pool string, events ...outbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[pool]++
	if r.events[pool] == nil {
		r.events[pool] = map[int64]outbox.Event{}
	}
	for _, e := range events {
		r.events[pool][e.GlobalSequence] = e
	}
}

func (r *payloadRecorder) count(pool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events[pool])
}

// An event whose payload is bigger than 64 KiB as jsonb travels in its job
// as a reference: the job row holds the envelope without data and metadata,
// and "payload_in_log": true (so River's fetch, its rescues and River UI
// handle rows of a few hundred bytes, whatever size an appender made an
// event); the handler still gets the whole event, read from the log. Both
// ways a payload can be big are covered: stored big (incompressible), and
// stored small but big once decompressed. A payload just under the limit,
// and a small one, stay in the args. On the plain path, the general path
// (key-ordered) and in a transaction group. A job whose referenced event
// the log no longer holds fails naming it; it never reaches a handler
// without its data.
func TestBigEventsTravelByReference(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	for _, p := range []bustype.PoolParams{
		{Name: "big-plain"},
		{Name: "big-keyed", Ordering: bustype.OrderingKey},
		{Name: "big-grouped", Grouping: bustype.GroupTransaction},
	} {
		_, _, err := admin.PoolCreate(ctx, p)
		require.NoError(t, err)
	}

	rec := &payloadRecorder{events: map[string]map[int64]outbox.Event{}, calls: map[string]int{}}
	ws := workers.NewRegistry()
	workers.Add(ws, river.WorkFunc(func(_ context.Context, job *river.Job[bigPlainArgs]) error {
		rec.add("big-plain", job.Args.Event)
		return nil
	}), nil)
	workers.Add(ws, river.WorkFunc(func(_ context.Context, job *river.Job[bigKeyedArgs]) error {
		rec.add("big-keyed", job.Args.Event)
		return nil
	}), nil)
	workers.Add(ws, river.WorkFunc(func(_ context.Context, job *river.Job[bigGroupedArgs]) error {
		rec.add("big-grouped", job.Args.Events...)
		return nil
	}), nil)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })

	random := make([]byte, 96<<10)
	_, err = rand.Read(random)
	require.NoError(t, err)
	events := []outbox.Event{
		{Type: "small", Key: "k", Data: json.RawMessage(`{"n": 1}`), Metadata: json.RawMessage(`{"m": "1"}`)},
		{Type: "stored-big", Key: "k", Data: json.RawMessage(fmt.Sprintf(`{"s": %q}`, base64.StdEncoding.EncodeToString(random))), Metadata: json.RawMessage(`{"m": "2"}`)},
		{Type: "compressed-big", Key: "k", Data: json.RawMessage(fmt.Sprintf(`{"s": %q}`, strings.Repeat("a", 1<<20)))},
		{Type: "just-under", Key: "k", Data: json.RawMessage(fmt.Sprintf(`{"s": %q}`, strings.Repeat("a", 60_000)))},
	}
	big := map[string]bool{"stored-big": true, "compressed-big": true}
	appended, err := outbox.Append(ctx, b.db, events...)
	require.NoError(t, err)
	last := appended[len(appended)-1].GlobalSequence

	testwait.Eventually(t, 60*time.Second, func() bool {
		return rec.count("big-plain") == 4 && rec.count("big-keyed") == 4 && rec.count("big-grouped") == 4
	}, "every pool's handler gets the four events")

	// The handlers got every event whole, as the log holds it.
	for pool, got := range rec.events {
		for seq, e := range got {
			var same bool
			require.NoError(t, b.db.QueryRow(ctx, `SELECT data = $2::jsonb AND metadata = $3::jsonb AND type = $4
				FROM riverbus_event WHERE global_sequence = $1`, seq, string(e.Data), string(e.Metadata), e.Type).Scan(&same))
			require.True(t, same, "pool %s, event %d (%s): the handler's event is the log's", pool, seq, e.Type)
		}
	}

	// The job rows hold references for the big events only, in exactly
	// the shape of bustype.EventJobRef.
	checkRef := func(raw json.RawMessage, typ string) {
		t.Helper()
		var keys map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &keys))
		if !big[typ] {
			require.Contains(t, keys, "data", "%s travels in its job", typ)
			require.NotContains(t, keys, "payload_in_log", typ)
			return
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var ref bustype.EventJobRef
		require.NoError(t, dec.Decode(&ref), typ)
		require.True(t, ref.PayloadInLog, typ)
		require.Equal(t, typ, ref.Type)
		want, err := json.Marshal(ref)
		require.NoError(t, err)
		var wantKeys map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(want, &wantKeys))
		require.ElementsMatch(t, slices.Collect(maps.Keys(wantKeys)), slices.Collect(maps.Keys(keys)), "%s: exactly the keys of an EventJobRef", typ)
	}
	for _, pool := range []string{"big-plain", "big-keyed"} {
		rows, err := b.db.Query(ctx, `SELECT args, args->>'type' FROM river_job WHERE kind = $1`, pool)
		require.NoError(t, err)
		jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Args json.RawMessage
			Type string
		}])
		require.NoError(t, err)
		for _, j := range jobs {
			checkRef(j.Args, j.Type)
		}
		n := len(jobs)
		require.Equal(t, 4, n, pool)
	}
	var group struct {
		Events []json.RawMessage `json:"events"`
	}
	require.NoError(t, b.db.QueryRow(ctx, `SELECT args FROM river_job WHERE kind = 'big-grouped'`).Scan(&group))
	require.Len(t, group.Events, 4)
	for i, raw := range group.Events {
		checkRef(raw, events[i].Type)
	}

	// A reference to an event the log does not hold (as another event, or
	// at all) fails the job, naming the event; the handler never runs.
	var id int64
	require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
		SELECT jsonb_build_object('global_sequence', $1::bigint, 'event_id', gen_random_uuid(), 'type', 'stored-big',
			'key', 'k', 'tags', '[]'::jsonb, 'occurred_at', now(), 'payload_in_log', true), 'big-plain', 1, queue, 'available'
		FROM riverbus_pool WHERE name = 'big-plain' RETURNING id`, last-2).Scan(&id))
	jobtest.WaitJobState(t, b.db, id, "discarded")
	var lastError string
	require.NoError(t, b.db.QueryRow(ctx, `SELECT errors[1]->>'error' FROM river_job WHERE id = $1`, id).Scan(&lastError))
	require.Contains(t, lastError, fmt.Sprintf("refers to the payload of events [%d] in riverbus_event, which no longer holds them", last-2))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, 4, rec.calls["big-plain"], "no handler ran for the job")
}

type bigSlowArgs struct{ workers.Args }

func (bigSlowArgs) Kind() string { return "big-slow" }

// Reading a big event's payload counts against the job's time: River
// bounds only Work by JobTimeout, and rescues a job still running
// RescueStuckJobsAfter after it began, starting it again beside the first
// attempt. A read held up past half that margin (here by a lock on the log;
// in production by a server busy with other big reads) fails the attempt
// with an error naming the setting, rather than running on while the job
// is rescued and read again; once the log can be read, the next attempt
// delivers the whole event.
func TestBigEventReadGivesWayBeforeRescue(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	fanout, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	_, _, err = fanout.PoolCreate(ctx, bustype.PoolParams{Name: "big-slow", Retry: bustype.RetrySchedule{Base: 100 * time.Millisecond, Factor: 1, MaxDelay: 100 * time.Millisecond}})
	require.NoError(t, err)
	require.NoError(t, fanout.Start(ctx))
	random := make([]byte, 96<<10)
	_, err = rand.Read(random)
	require.NoError(t, err)
	appended, err := outbox.Append(ctx, b.db, outbox.Event{Type: "stored-big", Key: "k",
		Data: json.RawMessage(fmt.Sprintf(`{"s": %q}`, base64.StdEncoding.EncodeToString(random)))})
	require.NoError(t, err)
	seq := appended[0].GlobalSequence
	var id int64
	testwait.Eventually(t, 30*time.Second, func() bool {
		return b.db.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = 'big-slow'`).Scan(&id) == nil
	}, "the fan-out makes the event's job")
	require.NoError(t, fanout.Stop(ctx))

	// Nothing may read the log until the lock is released.
	lock, err := b.db.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `LOCK TABLE riverbus_event IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	rec := &payloadRecorder{events: map[string]map[int64]outbox.Event{}, calls: map[string]int{}}
	ws := workers.NewRegistry()
	workers.Add(ws, river.WorkFunc(func(_ context.Context, job *river.Job[bigSlowArgs]) error {
		rec.add("big-slow", job.Args.Event)
		return nil
	}), nil)
	work, err := riverbus.NewClient(b.db, &riverbus.Config{FanoutDisabled: true, Workers: ws,
		Work: workers.Config{JobTimeout: time.Second, RescueStuckJobsAfter: 3 * time.Second}})
	require.NoError(t, err)
	require.NoError(t, work.Start(ctx))
	t.Cleanup(func() { require.NoError(t, work.Stop(context.Background())) })
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) }) // first: Stop waits for the job's read

	var firstError string
	testwait.Eventually(t, 30*time.Second, func() bool {
		return b.db.QueryRow(ctx, `SELECT errors[1]->>'error' FROM river_job WHERE id = $1 AND errors[1] IS NOT NULL`, id).Scan(&firstError) == nil
	}, "the first attempt ends while the log is locked")
	require.Contains(t, firstError, "reading its big events' payloads from riverbus_event took over 1s")
	require.Contains(t, firstError, "RescueStuckJobsAfter 3s")
	require.Zero(t, rec.count("big-slow"), "no handler ran without the payload")

	require.NoError(t, lock.Rollback(ctx))
	testwait.Eventually(t, 60*time.Second, func() bool { return rec.count("big-slow") == 1 }, "a later attempt delivers the event")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := rec.events["big-slow"][seq]
	require.JSONEq(t, fmt.Sprintf(`{"s": %q}`, base64.StdEncoding.EncodeToString(random)), string(got.Data), "the whole payload")
}
