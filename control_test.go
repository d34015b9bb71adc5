package riverbus_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// The tests of this file play a neighbour: a login with no grant at all,
// which may still NOTIFY any channel, sending what River's control channel
// carries (River's producer.go, controlEventPayload). River acts on those
// messages; riverbus's driver passes on only what the database confirms.

type hookArgs struct{ workers.Args }

func (hookArgs) Kind() string { return "hooks" }

type gateArgs struct{ workers.Args }

func (gateArgs) Kind() string { return "gate" }

// holdingWorker holds each job until release is closed (then succeeds) or
// its context ends (then fails with the context's error, which River turns
// into a cancelled job when the context was cancelled remotely).
type holdingWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	release chan struct{}
	started atomic.Int64
}

func (w *holdingWorker[T]) Work(ctx context.Context, _ *river.Job[T]) error {
	w.started.Add(1)
	select {
	case <-w.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// countingWorker succeeds at once and counts the jobs it worked.
type countingWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	worked atomic.Int64
}

func (w *countingWorker[T]) Work(context.Context, *river.Job[T]) error {
	w.worked.Add(1)
	return nil
}

type controlBundle struct {
	db        *pgxpool.Pool
	client    *riverbus.Client
	hookQueue string
	gateQueue string
	gate      *holdingWorker[gateArgs]
	channel   string // River's control channel in this database
}

// setupControl creates the pools "hooks" (events of type "hook") and "gate"
// (type "gate") and starts a Client that works them with hooks and a
// holding gate worker.
func setupControl(t *testing.T, hooks river.Worker[hookArgs], hookWorkers int) (context.Context, *controlBundle) {
	t.Helper()
	ctx, b := setup(t)
	admin, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	hookPool, _, err := admin.PoolCreate(ctx, bustype.PoolParams{Name: "hooks", EventTypes: []string{"hook"}})
	require.NoError(t, err)
	gatePool, _, err := admin.PoolCreate(ctx, bustype.PoolParams{Name: "gate", EventTypes: []string{"gate"}})
	require.NoError(t, err)

	gate := &holdingWorker[gateArgs]{release: make(chan struct{})}
	ws := workers.NewRegistry()
	workers.Add(ws, hooks, &workers.AddOpts{MaxWorkers: hookWorkers})
	workers.Add(ws, gate, nil)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{Workers: ws})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	stopOnCleanup(t, client.Stop)
	return ctx, &controlBundle{
		db: b.db, client: client, hookQueue: hookPool.Queue, gateQueue: gatePool.Queue, gate: gate,
		channel: controlChannel(t, b.db),
	}
}

// stopOnCleanup stops a started client when the test ends, giving its jobs
// ten seconds.
func stopOnCleanup(t *testing.T, stop func(context.Context) error) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, stop(ctx))
	})
}

// controlChannel returns River's control channel in db: River prefixes it
// with the schema its tables are in (riverpgxv5's JobCancel query).
func controlChannel(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	var schema string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema))
	return schema + ".river_control"
}

// neighbour returns a connection to the test database as a new login that
// was granted nothing.
func (b *controlBundle) neighbour(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	buf := make([]byte, 8)
	_, err := rand.Read(buf)
	require.NoError(t, err)
	name, password := "rbt_neighbour_"+hex.EncodeToString(buf), hex.EncodeToString(buf)
	ident := pgx.Identifier{name}.Sanitize()
	// Utility statements take no parameters: the name and the hex password
	// are made here.
	_, err = b.db.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", ident, password))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.db.Exec(ctx, "DROP ROLE IF EXISTS "+ident); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	cfg := b.db.Config().ConnConfig.Copy()
	cfg.User, cfg.Password = name, password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) }) // before the role is dropped
	var mayRead bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT has_table_privilege('river_job', 'SELECT') OR has_table_privilege('river_queue', 'SELECT')`).Scan(&mayRead))
	require.False(t, mayRead, "the neighbour must hold no grant on River's tables")
	return conn
}

// forge sends one message on River's control channel per payload, as the
// neighbour, in one transaction.
func (b *controlBundle) forge(t *testing.T, conn *pgx.Conn, payloads ...any) {
	t.Helper()
	texts := make([]string, len(payloads))
	for i, p := range payloads {
		raw, err := json.Marshal(p)
		require.NoError(t, err)
		texts[i] = string(raw)
	}
	_, err := conn.Exec(context.Background(), `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, b.channel, texts)
	require.NoError(t, err)
}

func appendEvents(t *testing.T, db *pgxpool.Pool, typ string, n int) (last int64) {
	t.Helper()
	for range n {
		res, err := outbox.Append(context.Background(), db, outbox.Event{Type: typ, Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		last = res[len(res)-1].GlobalSequence
	}
	return last
}

func countJobs(t *testing.T, db *pgxpool.Pool, kind, state string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1 AND state = $2`, kind, state).Scan(&n))
	return n
}

// holdGateJob appends a gate event and returns the id of its job once a
// gate worker holds it: a running job an operator's cancel can end.
func (b *controlBundle) holdGateJob(t *testing.T) int64 {
	t.Helper()
	appendEvents(t, b.db, "gate", 1)
	var id int64
	require.Eventually(t, func() bool {
		err := b.db.QueryRow(context.Background(), `SELECT id FROM river_job WHERE kind = 'gate' AND state = 'running' ORDER BY id DESC LIMIT 1`).Scan(&id)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "no gate job ran")
	return id
}

// cancelAndWait cancels job id as an operator does (River's JobCancel) and
// waits until it ended cancelled. Sent after the neighbour's messages on the
// same channel, it arrives after them: once it took effect, so did they, or
// they were refused.
func (b *controlBundle) cancelAndWait(t *testing.T, ctx context.Context, rc *river.Client[pgx.Tx], id int64) {
	t.Helper()
	_, err := rc.JobCancel(ctx, id)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return jobState(t, b.db, id) == rivertype.JobStateCancelled }, 10*time.Second, 10*time.Millisecond,
		"an operator's JobCancel of a running job must cancel it within 10s")
}

// TestForgedCancelsCancelNothing: a neighbour sprays cancel messages over a
// range of job ids while a pool's jobs are in flight. No job ends
// cancelled, all complete and the checkpoint is exact; an operator's real
// cancel still cancels.
func TestForgedCancelsCancelNothing(t *testing.T) {
	t.Parallel()
	const inFlight = 10
	hooks := &holdingWorker[hookArgs]{release: make(chan struct{})}
	ctx, b := setupControl(t, hooks, inFlight)
	released := false
	release := func() {
		if !released {
			close(hooks.release)
			released = true
		}
	}
	t.Cleanup(release)

	last := appendEvents(t, b.db, "hook", inFlight)
	require.Eventually(t, func() bool { return hooks.started.Load() == inFlight }, 30*time.Second, 10*time.Millisecond)
	var operatorCancels int64
	require.NoError(t, b.db.QueryRow(ctx, `SELECT min(id) FROM river_job WHERE kind = 'hooks' AND state = 'running'`).Scan(&operatorCancels))

	neighbour := b.neighbour(t)
	type cancel struct {
		Action string `json:"action"`
		JobID  int64  `json:"job_id"`
		Queue  string `json:"queue"`
	}
	forged := make([]any, 0, 5000)
	for id := range int64(5000) {
		forged = append(forged, cancel{Action: "cancel", JobID: id + 1, Queue: b.hookQueue})
	}
	b.forge(t, neighbour, forged...)

	b.cancelAndWait(t, ctx, b.client.River(), operatorCancels)
	require.Equal(t, 1, countJobs(t, b.db, "hooks", "cancelled"), "only the operator's cancel may cancel a job")
	require.Equal(t, int64(inFlight), hooks.started.Load(), "no job was worked twice")

	release()
	waitCtx, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	require.NoError(t, b.client.CheckpointWait(waitCtx, "hooks", last, nil))
	require.Equal(t, inFlight-1, countJobs(t, b.db, "hooks", "completed"))
	require.Equal(t, 1, countJobs(t, b.db, "hooks", "cancelled"))
	cp, err := b.client.CheckpointGet(ctx, "hooks")
	require.NoError(t, err)
	require.Equal(t, last, cp.Checkpoint)
}

type queueMessage struct {
	Action string `json:"action"`
	Queue  string `json:"queue"`
}

// TestForgedPauseDoesNotStopAPool: a neighbour pauses the pool's queue and
// every queue ("*"); the pool's next jobs are worked within 10 s all the
// same.
func TestForgedPauseDoesNotStopAPool(t *testing.T) {
	t.Parallel()
	hooks := &countingWorker[hookArgs]{}
	ctx, b := setupControl(t, hooks, 2)
	appendEvents(t, b.db, "hook", 1)
	require.Eventually(t, func() bool { return hooks.worked.Load() == 1 }, 30*time.Second, 10*time.Millisecond)
	gateJob := b.holdGateJob(t)

	neighbour := b.neighbour(t)
	b.forge(t, neighbour, queueMessage{Action: "pause", Queue: b.hookQueue}, queueMessage{Action: "pause", Queue: "*"})
	b.cancelAndWait(t, ctx, b.client.River(), gateJob)

	last := appendEvents(t, b.db, "hook", 3)
	require.Eventually(t, func() bool { return hooks.worked.Load() == 4 }, 10*time.Second, 10*time.Millisecond,
		"a forged pause stopped the pool: %d of 3 jobs worked", hooks.worked.Load()-1)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.CheckpointWait(waitCtx, "hooks", last, nil))
}

// queueEvents subscribes to the pause and resume events of the client's
// River queues until the test ends.
func (b *controlBundle) queueEvents(t *testing.T) <-chan *river.Event {
	t.Helper()
	events, unsubscribe := b.client.River().Subscribe(river.EventKindQueuePaused, river.EventKindQueueResumed)
	t.Cleanup(unsubscribe)
	return events
}

// waitQueueEvent waits for River's event of kind about queue.
func waitQueueEvent(t *testing.T, events <-chan *river.Event, kind river.EventKind, queue string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev := <-events:
			if ev.Kind == kind && ev.Queue != nil && ev.Queue.Name == queue {
				return
			}
		case <-deadline:
			t.Fatalf("no %s event for queue %s within %s", kind, queue, within)
		}
	}
}

// TestForgedResumeDoesNotUndoAPause: an operator pauses the pool's queue;
// a neighbour sends resume messages for it and for "*" for 3 s; no job is
// worked until the operator resumes.
func TestForgedResumeDoesNotUndoAPause(t *testing.T) {
	t.Parallel()
	hooks := &countingWorker[hookArgs]{}
	ctx, b := setupControl(t, hooks, 2)
	events := b.queueEvents(t)

	require.NoError(t, b.client.River().QueuePause(ctx, b.hookQueue, nil))
	waitQueueEvent(t, events, river.EventKindQueuePaused, b.hookQueue, 10*time.Second)
	// The queue's pause pauses the pool too (one pause); its fan-out goes
	// on here, as a pool's does when resumed alone on a queue it shares,
	// so that jobs wait for the paused workers.
	_, err := b.db.Exec(ctx, `UPDATE riverbus_pool SET status = 'active' WHERE name = 'hooks'`)
	require.NoError(t, err)
	last := appendEvents(t, b.db, "hook", 3)
	require.Eventually(t, func() bool { return countJobs(t, b.db, "hooks", "available") == 3 }, 30*time.Second, 10*time.Millisecond)
	gateJob := b.holdGateJob(t)

	neighbour := b.neighbour(t)
	forgeEvery := time.NewTicker(200 * time.Millisecond)
	defer forgeEvery.Stop()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-forgeEvery.C {
		b.forge(t, neighbour, queueMessage{Action: "resume", Queue: b.hookQueue}, queueMessage{Action: "resume", Queue: "*"})
		require.Zero(t, hooks.worked.Load(), "a forged resume undid the operator's pause")
	}
	b.cancelAndWait(t, ctx, b.client.River(), gateJob)
	require.Zero(t, hooks.worked.Load(), "a forged resume undid the operator's pause")
	require.Equal(t, 3, countJobs(t, b.db, "hooks", "available"))

	require.NoError(t, b.client.River().QueueResume(ctx, b.hookQueue, nil))
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.CheckpointWait(waitCtx, "hooks", last, nil))
	require.Equal(t, int64(3), hooks.worked.Load())
}

// TestLostQueueNotificationHealsWithinTenSeconds: a pause or resume whose
// message never arrived (the listener was reconnecting, or checking the
// message failed) reaches the workers within 10 s: the driver compares
// river_queue with what it passed on every few seconds, where River itself
// looks once a minute.
func TestLostQueueNotificationHealsWithinTenSeconds(t *testing.T) {
	t.Parallel()
	hooks := &countingWorker[hookArgs]{}
	ctx, b := setupControl(t, hooks, 2)
	events := b.queueEvents(t)

	// River's own pause, without its message.
	_, err := b.db.Exec(ctx, `UPDATE river_queue SET paused_at = now() WHERE name = $1`, b.hookQueue)
	require.NoError(t, err)
	waitQueueEvent(t, events, river.EventKindQueuePaused, b.hookQueue, 10*time.Second)

	_, err = b.db.Exec(ctx, `UPDATE river_queue SET paused_at = NULL WHERE name = $1`, b.hookQueue)
	require.NoError(t, err)
	waitQueueEvent(t, events, river.EventKindQueueResumed, b.hookQueue, 10*time.Second)
	last := appendEvents(t, b.db, "hook", 2)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, b.client.CheckpointWait(waitCtx, "hooks", last, nil))
}

type ownArgs struct{}

func (ownArgs) Kind() string { return "own" }

// TestNewRiverDriverGuardsAnApplicationsOwnClient: a River client an
// application builds itself with workers.NewDriver works on through a
// neighbour's forged cancels; an operator's cancel still ends its job.
func TestNewRiverDriverGuardsAnApplicationsOwnClient(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	w := &holdingWorker[ownArgs]{release: make(chan struct{})}
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	rc, err := river.NewClient(workers.NewDriver(tb.db, nil), &river.Config{
		Queues:  map[string]river.QueueConfig{"own": {MaxWorkers: 2}},
		Workers: ws,
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(ctx))
	stopOnCleanup(t, rc.Stop)
	var ids []int64
	for range 2 {
		res, err := rc.Insert(ctx, ownArgs{}, &river.InsertOpts{Queue: "own"})
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	require.Eventually(t, func() bool { return w.started.Load() == 2 }, 30*time.Second, 10*time.Millisecond)

	b := &controlBundle{db: tb.db, channel: controlChannel(t, tb.db)}
	type cancel struct {
		Action string `json:"action"`
		JobID  int64  `json:"job_id"`
		Queue  string `json:"queue"`
	}
	b.forge(t, b.neighbour(t), cancel{Action: "cancel", JobID: ids[0], Queue: "own"})
	b.cancelAndWait(t, ctx, rc, ids[1])
	require.Equal(t, rivertype.JobStateRunning, jobState(t, tb.db, ids[0]), "a forged cancel ended the job")

	close(w.release)
	require.Eventually(t, func() bool { return jobState(t, tb.db, ids[0]) == rivertype.JobStateCompleted }, 10*time.Second, 10*time.Millisecond)
}
