package riverbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

type drainArgs struct{ workers.Args }

func (drainArgs) Kind() string { return "drain" }

// A key-ordered pool drained by many workers at once: the hand-off
// completes lane jobs in groups, beside River's completer. Every job ends
// completed, River emits its completed event for each (a completion that
// raced River's completer made River drop events, and deadlocked with
// it), and each key's events ran in sequence order.
func TestOrderedPoolDrainKeepsOrderAndRiversEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	const n, keys = 3000, 60

	var mu sync.Mutex
	handled := map[string][]int64{}
	ws := workers.NewRegistry()
	workers.Add(ws, river.WorkFunc(func(_ context.Context, job *river.Job[drainArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		handled[job.Args.Key] = append(handled[job.Args.Key], job.Args.GlobalSequence)
		return nil
	}), &workers.AddOpts{MaxWorkers: 100})
	client := startKeyOrdered(t, db, ws, "drain", n, keys)
	completed, cancel := client.River().Subscribe(river.EventKindJobCompleted)
	defer cancel()
	deadline := time.After(2 * time.Minute)
	for done := 0; done < n; {
		select {
		case <-completed:
			done++
		case <-deadline:
			var states string
			require.NoError(t, db.QueryRow(ctx, `SELECT string_agg(state || '=' || c, ' ') FROM (SELECT state::text, count(*) AS c FROM river_job GROUP BY 1) s`).Scan(&states))
			t.Fatalf("River emitted %d of %d completed events; jobs: %s", done, n, states)
		}
	}

	var unfinished int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state <> 'completed'").Scan(&unfinished))
	require.Zero(t, unfinished)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, handled, keys)
	for key, seqs := range handled {
		require.Len(t, seqs, n/keys, key)
		require.True(t, slices.IsSorted(seqs), "key %s ran out of order: %v", key, seqs)
	}
}

type cappedArgs struct{ workers.Args }

func (cappedArgs) Kind() string { return "capped" }

// A queue of ordered pools gets more River slots than handlers, so River
// fetches while jobs wait for their lane hand-off: River holds more than
// MaxWorkers of its jobs running at once, and still no more than
// MaxWorkers handlers run at once.
func TestOrderedPoolFetchesAheadButCapsHandlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	const n, keys, maxWorkers = 240, 40, 4

	var mu sync.Mutex
	var now, peak, done int
	ws := workers.NewRegistry()
	workers.Add(ws, river.WorkFunc(func(ctx context.Context, job *river.Job[cappedArgs]) error {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		now--
		done++
		mu.Unlock()
		return nil
	}), &workers.AddOpts{MaxWorkers: maxWorkers})
	startKeyOrdered(t, db, ws, "capped", n, keys)
	runningPeak := 0
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var running, unfinished, count int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state <> 'completed'), count(*)
			FROM river_job WHERE kind = 'capped'`).Scan(&running, &unfinished, &count))
		runningPeak = max(runningPeak, running)
		if count == n && unfinished == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d jobs unfinished", unfinished, n)
		time.Sleep(2 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, n, done, "handled (peak handlers %d, peak running %d)", peak, runningPeak)
	require.Equal(t, maxWorkers, peak, "handlers running at once")
	require.Greater(t, runningPeak, maxWorkers, "River never held more jobs running than handlers: no slots for jobs waiting on their hand-off")
}

// startKeyOrdered creates the key-ordered pool name, appends n events over
// keys keys, and starts a client with ws, stopped when the test ends.
func startKeyOrdered(t *testing.T, db *pgxpool.Pool, ws *workers.Registry, name string, n, keys int) *riverbus.Client {
	t.Helper()
	ctx := context.Background()
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: name, Ordering: bustype.OrderingKey})
	require.NoError(t, err)
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = outbox.Event{Type: "T", Key: fmt.Sprintf("k%d", i%keys), Data: json.RawMessage(`{}`)}
	}
	_, err = outbox.Append(ctx, db, events...)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	return client
}

type waitingArgs struct{ workers.Args }

func (waitingArgs) Kind() string { return "waiting" }

// A job fetched ahead that waits for a handler slot is still River's
// running job: River UI's Cancel (River's JobCancel) cancels it, and its
// handler never runs; it is not snoozed back to work.
func TestOrderedJobWaitingForAHandlerCanBeCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)

	first, release := make(chan string, 1), make(chan struct{})
	var mu sync.Mutex
	var ran []string
	ws := workers.NewRegistry()
	workers.Add(ws, river.WorkFunc(func(ctx context.Context, job *river.Job[waitingArgs]) error {
		mu.Lock()
		ran = append(ran, job.Args.Key)
		isFirst := len(ran) == 1
		mu.Unlock()
		if isFirst {
			first <- job.Args.Key
			<-release
		}
		return nil
	}), &workers.AddOpts{MaxWorkers: 1})
	client := startKeyOrdered(t, db, ws, "waiting", 2, 2) // keys k0, k1
	running := <-first
	defer close(release)

	// The other key's job is fetched into the second River slot and waits
	// for the only handler.
	var id int64
	require.Eventually(t, func() bool {
		err := db.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = 'waiting' AND args->>'key' <> $1 AND state = 'running'`, running).Scan(&id)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the second job was never fetched while the first ran")
	_, err := client.River().JobCancel(ctx, id)
	require.NoError(t, err)
	var state string
	for deadline := time.Now().Add(30 * time.Second); state != "cancelled" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		require.NoError(t, db.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	}
	require.Equal(t, "cancelled", state, "the job cancelled while it waited for a handler")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{running}, ran, "a cancelled job's handler ran")
}
