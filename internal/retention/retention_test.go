package retention_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/retention"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
)

type testBundle struct {
	db *pgxpool.Pool
	f  *fanout.Fanout
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	db := pgtest.NewPool(t)
	return context.Background(), &testBundle{db: db, f: fanouttest.NewFanout(t, db, fanout.Config{BatchSize: 10_000})}
}

// appendEvents appends n events, each in a transaction of its own, as if
// event i had been appended at base + i minutes (base zero: now), and
// returns the last sequence. Only the owner can rewrite appended_at, the
// time the keep period runs on; occurred_at moves with it, as it would for
// an application that leaves it to its default.
func appendEvents(t *testing.T, db *pgxpool.Pool, n int, base time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	var last int64
	for range n {
		require.NoError(t, db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('thing.happened', '{}') RETURNING global_sequence`).Scan(&last))
	}
	if !base.IsZero() {
		_, err := db.Exec(ctx, `UPDATE riverbus_event SET appended_at = $1::timestamptz + make_interval(mins => global_sequence::int),
			occurred_at = $1::timestamptz + make_interval(mins => global_sequence::int)`, base)
		require.NoError(t, err)
	}
	return last
}

// insertMany appends n events in one statement (one transaction).
func insertMany(t *testing.T, db *pgxpool.Pool, n int) int64 {
	t.Helper()
	var last int64
	require.NoError(t, db.QueryRow(context.Background(), `WITH i AS (
		INSERT INTO riverbus_event (type, data) SELECT 'thing.happened', '{}' FROM generate_series(1, $1) RETURNING global_sequence)
		SELECT max(global_sequence) FROM i`, n).Scan(&last))
	return last
}

// consume fans out until every active pool's cursor is at the horizon,
// completes every job and advances every checkpoint.
func consume(t *testing.T, b *testBundle) {
	t.Helper()
	ctx := context.Background()
	for range 100 {
		if res := fanouttest.Pass(t, b.f); !res.More {
			break
		}
	}
	_, err := b.db.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE state <> 'completed'`)
	require.NoError(t, err)
	_, err = checkpoint.AdvanceAll(ctx, b.db)
	require.NoError(t, err)
}

func eventCount(t *testing.T, db *pgxpool.Pool, above int64) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM riverbus_event WHERE global_sequence > $1`, above).Scan(&n))
	return n
}

func minSequence(t *testing.T, db *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT coalesce(min(global_sequence), 0) FROM riverbus_event`).Scan(&n))
	return n
}

func setPolicy(t *testing.T, db *pgxpool.Pool, keep time.Duration) {
	t.Helper()
	_, err := retention.SetPolicy(context.Background(), db, true, keep)
	require.NoError(t, err)
}

func TestNoPolicyDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	last := appendEvents(t, b.db, 20, time.Time{})
	consume(t, b)

	plan, err := retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, bustype.RetentionStopDisabled, plan.StoppedBy)
	require.Zero(t, plan.Events)
	require.Equal(t, last, eventCount(t, b.db, 0))
}

// The dry run reports what Trim then deletes, and deletes nothing.
func TestDryRunDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	last := appendEvents(t, b.db, 30, time.Time{})
	consume(t, b)
	setPolicy(t, b.db, 0)

	plan, err := retention.Plan(ctx, b.db, &retention.Opts{BatchSize: 7})
	require.NoError(t, err)
	require.False(t, plan.Applied)
	require.Equal(t, int64(30), plan.Events)
	require.Equal(t, int64(0), plan.From)
	require.Equal(t, last, plan.Through)
	require.Equal(t, bustype.RetentionStopFloor, plan.StoppedBy)
	require.NotNil(t, plan.Oldest)
	require.NotNil(t, plan.Newest)
	require.Equal(t, 5, plan.Batches, "30 events in steps of 7")
	require.Equal(t, last, eventCount(t, b.db, 0), "the dry run deleted nothing")
	pol, err := retention.GetPolicy(ctx, b.db)
	require.NoError(t, err)
	require.Zero(t, pol.TrimmedThrough)

	done, err := retention.Trim(ctx, b.db, &retention.Opts{BatchSize: 7})
	require.NoError(t, err)
	require.True(t, done.Applied)
	require.Equal(t, plan.Events, done.Events)
	require.Equal(t, plan.Through, done.Through)
	require.Zero(t, eventCount(t, b.db, 0))
	require.Equal(t, last, done.Policy.TrimmedThrough)
	require.Equal(t, int64(30), done.Policy.EventsTrimmed)
}

// The floor is the slowest pool's checkpoint, and the keep period (against
// an injected clock) holds younger events.
func TestFloorSlowestPoolAndKeep(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "fast"})
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "slow"})
	appendEvents(t, b.db, 100, base) // event i appended at base + i minutes
	consume(t, b)
	// slow still has the job of event 41 unfinished: its checkpoint is 40.
	_, err := b.db.Exec(ctx, `UPDATE river_job SET state = 'retryable', finalized_at = NULL
		WHERE kind = 'slow' AND (args->>'global_sequence')::bigint = 41`)
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE riverbus_pool_checkpoint SET checkpoint_seq = 40 WHERE pool = 'slow'`)
	require.NoError(t, err)

	setPolicy(t, b.db, 30*time.Minute)
	now := base.Add(60 * time.Minute) // keeps events appended after base+30m: 31 and up
	clock := func() time.Time { return now }

	plan, err := retention.Trim(ctx, b.db, &retention.Opts{Now: clock})
	require.NoError(t, err)
	require.Equal(t, int64(30), plan.Through, "the keep period holds event 31")
	require.Equal(t, bustype.RetentionStopKeep, plan.StoppedBy)
	require.Equal(t, int64(40), plan.Floor)
	require.Equal(t, bustype.RetentionHold{Rule: "pool", Holder: "slow", Floor: 40}, *plan.HeldBy())
	require.Equal(t, int64(31), minSequence(t, b.db))

	now = base.Add(24 * time.Hour) // every event is old now
	plan, err = retention.Trim(ctx, b.db, &retention.Opts{Now: clock})
	require.NoError(t, err)
	require.Equal(t, int64(40), plan.Through, "the slow pool holds event 41")
	require.Equal(t, bustype.RetentionStopFloor, plan.StoppedBy)
	require.Equal(t, int64(41), minSequence(t, b.db))
	require.Equal(t, int64(40), plan.Policy.TrimmedThrough)
}

// A paused pool holds the floor where it stopped: after it resumes it gets
// every event, those appended before and during the pause.
func TestPausedPoolLosesNothing(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "live"})
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "paused"})
	first := appendEvents(t, b.db, 10, time.Time{})
	consume(t, b) // both pools have events 1-10
	_, _, err := pools.SetStatus(ctx, b.db, "paused", bustype.PoolPaused)
	require.NoError(t, err)
	last := appendEvents(t, b.db, 40, time.Time{})
	consume(t, b) // only live has 11-50
	setPolicy(t, b.db, 0)

	svc, err := retention.NewService(b.db, &retention.ServiceConfig{BatchSize: 3, Logger: fanouttest.QuietLogger()})
	require.NoError(t, err)
	plan, err := svc.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, first, plan.Through)
	require.Equal(t, bustype.RetentionHold{Rule: "pool", Holder: "paused", Floor: first}, *plan.HeldBy())
	require.Equal(t, last-first, eventCount(t, b.db, 0))

	_, _, err = pools.SetStatus(ctx, b.db, "paused", bustype.PoolActive)
	require.NoError(t, err)
	consume(t, b)
	jobs, _ := fanouttest.Jobs(t, b.db, "paused")
	for seq := int64(1); seq <= last; seq++ {
		require.Equal(t, 1, jobs[seq], "event %d", seq)
	}
	// Now that it has passed them, they go.
	plan, err = svc.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, last, plan.Through)
	require.Zero(t, eventCount(t, b.db, 0))
}

// Skipped ranges, late events, undeliverable dead letters and the horizon
// each hold the floor.
func TestHorizonLateAndDeadLetterHolds(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	appendEvents(t, b.db, 50, time.Time{})
	consume(t, b)
	setPolicy(t, b.db, 0)

	trimTo := func(want int64, rule string) {
		t.Helper()
		plan, err := retention.Trim(ctx, b.db, nil)
		require.NoError(t, err)
		require.Equal(t, want, plan.Through)
		require.Equal(t, rule, plan.HeldBy().Rule)
		require.Equal(t, want+1, minSequence(t, b.db))
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	// An undeliverable event's dead letter: its retry rebuilds from the row.
	exec(`INSERT INTO riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority)
		VALUES (1, 'p1', 8, 'p1', '{"global_sequence": 8, "undeliverable": "too deep"}', 0, 25, 1)`)
	// An ordinary dead letter carries its envelope: it holds nothing.
	exec(`INSERT INTO riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority)
		VALUES (2, 'p1', 3, 'p1', '{"global_sequence": 3}', 25, 25, 1)`)
	trimTo(7, "dead letter")
	exec(`DELETE FROM riverbus_dead_letter`)

	// A late event not yet retired.
	exec(`INSERT INTO riverbus_late (sequence) VALUES (15)`)
	trimTo(14, "late")
	exec(`DELETE FROM riverbus_late`)

	// A skipped range still watched: an event may still commit in it.
	exec(`INSERT INTO riverbus_skipped (first_sequence, last_sequence, xid_bound) VALUES (22, 23, pg_current_xact_id())`)
	trimTo(21, "skipped")
	exec(`DELETE FROM riverbus_skipped`)

	// The horizon: what it has not passed stays, even when a pool's
	// cursor is beyond (a repaired horizon).
	exec(`UPDATE riverbus_horizon SET horizon = 30`)
	trimTo(30, "horizon")
	exec(`DELETE FROM riverbus_horizon`)
	plan, err := retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, int64(30), plan.Through, "a missing horizon row holds everything")
	// Its repair starts where the log begins, even with no pool left: the
	// deleted numbers are not walked again as gaps.
	exec(`DELETE FROM riverbus_pool`)
	repaired, err := horizon.Repair(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, int64(30), repaired.Horizon)

	// With no pool left, nothing has consumed the rest of the log: it stays
	// for the next pool created --from beginning, keep period or not.
	exec(`UPDATE riverbus_horizon SET horizon = 50`)
	plan, err = retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, int64(30), plan.Through)
	require.Equal(t, "no pools", plan.HeldBy().Rule)
	require.Equal(t, int64(31), minSequence(t, b.db))
	exec(`UPDATE riverbus_event SET appended_at = now() - interval '10 days'`)
	setPolicy(t, b.db, time.Hour)
	plan, err = retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, int64(30), plan.Through, "a keep period the events are past does not override it")
	require.Equal(t, "no pools", plan.HeldBy().Rule)
}

// A transaction is deleted whole or not at all: a transaction-grouped pool
// must still find the part of a group it already delivered.
func TestTransactionKeptWhole(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "grouped", Grouping: bustype.GroupTransaction})
	appendEvents(t, b.db, 5, time.Time{}) // 1-5
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)                               //nolint:errcheck
	open := fanouttest.AppendEvent(t, tx, "group.first") // 6
	appendEvents(t, b.db, 5, time.Time{})                // 7-11
	fanouttest.AppendEvent(t, tx, "group.second")        // 12
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, int64(6), open)
	consume(t, b)
	setPolicy(t, b.db, 0)
	// The pool has passed 9, not 12.
	_, err = b.db.Exec(ctx, `UPDATE riverbus_pool_checkpoint SET checkpoint_seq = 9 WHERE pool = 'grouped'`)
	require.NoError(t, err)

	plan, err := retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, int64(5), plan.Through, "event 6's transaction has event 12 above the floor")
	require.Equal(t, bustype.RetentionStopTransaction, plan.StoppedBy)
	require.Equal(t, int64(6), minSequence(t, b.db))
}

// A transaction's recorded command is deleted with the last of its events,
// and only then: a transaction split over two batches keeps its command
// until the second, and one whose events stay keeps it.
func TestCommandGoesWithItsEvents(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	commandTx := func(name string, events int) {
		t.Helper()
		tx, err := b.db.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		require.NoError(t, outbox.RecordCommandTx(ctx, tx, outbox.Command{Type: name, Data: []byte(`{}`)}))
		for range events {
			fanouttest.AppendEvent(t, tx, "thing.happened")
		}
		require.NoError(t, tx.Commit(ctx))
	}
	commands := func() []string {
		t.Helper()
		rows, err := b.db.Query(ctx, `SELECT type FROM riverbus_command ORDER BY type`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	commandTx("a", 3) // 1-3
	commandTx("b", 4) // 4-7
	commandTx("c", 2) // 8-9
	consume(t, b)
	setPolicy(t, b.db, 0)
	_, err := b.db.Exec(ctx, `UPDATE riverbus_pool_checkpoint SET checkpoint_seq = 7 WHERE pool = 'p1'`)
	require.NoError(t, err)

	// The first batch ends inside b's events.
	plan, err := retention.Trim(ctx, b.db, &retention.Opts{BatchSize: 5, MaxBatches: 1})
	require.NoError(t, err)
	require.Equal(t, int64(5), plan.Through)
	require.Equal(t, []string{"b", "c"}, commands(), "a's events are gone, b's are not all gone")

	plan, err = retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, int64(7), plan.Through)
	require.Equal(t, []string{"c"}, commands(), "b's last event went; c's events stay above the floor")
}

// Pool create and reset after trimming: the beginning is the oldest
// retained event; a start below it is refused.
func TestBeginningAfterTrim(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	last := appendEvents(t, b.db, 20, time.Time{})
	consume(t, b)
	setPolicy(t, b.db, 0)
	_, err := retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	more := appendEvents(t, b.db, 5, time.Time{})

	p := fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "late-comer"})
	require.Equal(t, last, p.StartAfter)
	require.Equal(t, last, p.Cursor)

	_, _, err = pools.Create(ctx, b.db, bustype.PoolParams{Name: "too-early", From: bustype.FromSequence(3)})
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	require.ErrorContains(t, err, "retention removed every event up to 20")
	p, _, err = pools.Create(ctx, b.db, bustype.PoolParams{Name: "zero", From: bustype.FromSequence(0)})
	require.NoError(t, err)
	require.Equal(t, last, p.StartAfter, "0 is the beginning")

	p, err = pools.Reset(ctx, b.db, "p1", 0)
	require.NoError(t, err)
	require.Equal(t, last, p.Cursor)
	_, err = pools.Reset(ctx, b.db, "p1", 4)
	require.ErrorIs(t, err, bustype.ErrInvalidPool)

	consume(t, b)
	jobs, _ := fanouttest.Jobs(t, b.db, "late-comer")
	require.Equal(t, int(more-last), len(jobs))
}

// A pool reset to the beginning while retention deletes loses nothing
// above where it was reset to: the reset and the batches take turns on the
// retention lock.
func TestResetDuringTrimLosesNothing(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	last := insertMany(t, b.db, 20_000)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "rebuild", From: bustype.FromNow})
	consume(t, b)
	p, err := pools.Get(ctx, b.db, "rebuild")
	require.NoError(t, err)
	require.Equal(t, last, p.Checkpoint)
	setPolicy(t, b.db, 0)

	var (
		wg      sync.WaitGroup
		trimErr error
		steps   int
	)
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, trimErr = retention.Trim(ctx, b.db, &retention.Opts{BatchSize: 200, Progress: func(bustype.RetentionPlan) {
			steps++
			if steps == 3 {
				close(started)
			}
		}})
	}()
	<-started
	reset, err := pools.Reset(ctx, b.db, "rebuild", 0)
	require.NoError(t, err)
	wg.Wait()
	require.NoError(t, trimErr)

	require.Greater(t, reset.Cursor, int64(0), "the reset came after some batches")
	require.Less(t, reset.Cursor, last, "and before the last")
	require.Equal(t, last-reset.Cursor, eventCount(t, b.db, reset.Cursor), "every event above the reset pool's cursor is there")
	pol, err := retention.GetPolicy(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, reset.Cursor, pol.TrimmedThrough, "retention stopped at the reset pool")

	consume(t, b)
	jobs, _ := fanouttest.Jobs(t, b.db, "rebuild")
	require.Equal(t, int(last-reset.Cursor), len(jobs))
}

// Every step deletes at most BatchSize events in a transaction of its own,
// and a cancelled Trim resumes where it stopped.
func TestBatchesBoundedAndResumable(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	last := insertMany(t, b.db, 5000)
	consume(t, b)
	setPolicy(t, b.db, 0)

	cctx, cancel := context.WithCancel(ctx)
	var prev int64
	var sizes []int64
	plan, err := retention.Trim(cctx, b.db, &retention.Opts{BatchSize: 300, Progress: func(p bustype.RetentionPlan) {
		sizes = append(sizes, p.Events-prev)
		prev = p.Events
		if p.Batches == 4 {
			cancel() // Ctrl-C between two batches
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(1200), plan.Events)
	for _, n := range sizes {
		require.LessOrEqual(t, n, int64(300))
	}
	pol, err := retention.GetPolicy(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, plan.Through, pol.TrimmedThrough)
	require.Equal(t, pol.TrimmedThrough+1, minSequence(t, b.db), "what was deleted is what trimmed_through says")

	rest, err := retention.Trim(ctx, b.db, &retention.Opts{BatchSize: 300})
	require.NoError(t, err)
	require.Equal(t, pol.TrimmedThrough, rest.From)
	require.Equal(t, last-1200, rest.Events)
	require.Zero(t, eventCount(t, b.db, 0))
	require.Equal(t, int64(5000), rest.Policy.EventsTrimmed)
}

// The service applies the policy at once and signals each pass.
func TestServiceRuns(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	last := appendEvents(t, b.db, 10, time.Time{})
	consume(t, b)
	setPolicy(t, b.db, 0)

	svc, err := retention.NewService(b.db, &retention.ServiceConfig{Interval: time.Hour, Logger: fanouttest.QuietLogger()})
	require.NoError(t, err)
	svc.TestSignals.Init(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	plan := svc.TestSignals.Trimmed.WaitOrTimeout()
	require.Equal(t, last, plan.Through)
	cancel()
	require.NoError(t, <-done)

	_, err = retention.NewService(b.db, &retention.ServiceConfig{BatchSize: -1})
	require.ErrorContains(t, err, "BatchSize")
}

// A real late event: the horizon skips a writer's sequence on the gap
// timeout and watches it. Retention stops below the skipped sequence while
// the writer is open, and below the late event until every pool has
// handled it; no pool loses it.
func TestLateEventThroughHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	f := fanouttest.NewFanout(t, db, fanout.Config{GapTimeout: time.Hour})
	clock := fanouttest.Clock(f)
	b := &testBundle{db: db, f: f}
	fanouttest.CreatePool(t, db, bustype.PoolParams{Name: "p1"})
	fanouttest.CreatePool(t, db, bustype.PoolParams{Name: "p2"})
	before := appendEvents(t, db, 5, time.Time{})
	writer, held := fanouttest.OpenWriter(t, db) // holds the next sequence
	after := appendEvents(t, db, 5, time.Time{})
	fanouttest.Pass(t, f) // records the gap at held
	clock.Advance(2 * time.Hour)
	consume(t, b) // skips held, fans out the rest
	require.Equal(t, after, fanouttest.Horizon(t, db).Horizon)
	setPolicy(t, db, 0)

	plan, err := retention.Trim(ctx, db, nil)
	require.NoError(t, err)
	require.Equal(t, before, plan.Through, "the skipped sequence holds the floor")
	require.Equal(t, "skipped", plan.HeldBy().Rule)

	require.NoError(t, writer.Commit(ctx)) // the late event
	fanouttest.Pass(t, f)                  // a round records it late
	plan, err = retention.Trim(ctx, db, nil)
	require.NoError(t, err)
	require.Equal(t, before, plan.Through, "the late event holds the floor until every pool handled it")
	require.Equal(t, int64(1), eventCount(t, db, held-1)-eventCount(t, db, held))

	consume(t, b) // delivered late to both pools, then retired
	consume(t, b)
	for _, pool := range []string{"p1", "p2"} {
		jobs, late := fanouttest.Jobs(t, db, pool)
		require.Equal(t, 1, jobs[held], pool)
		require.True(t, late[held], pool)
	}
	// Retired once its range is proven (the writer ended): xids are the
	// cluster's, so another test's open transaction on the shared server
	// can defer that by a round or more.
	var through int64
	testwait.Eventually(t, time.Minute, func() bool {
		plan, err = retention.Trim(ctx, db, nil)
		require.NoError(t, err)
		if through = plan.Through; through == after {
			return true
		}
		consume(t, b)
		return false
	}, "the late event never retired: retention still stops at %d", &through)
	require.Zero(t, eventCount(t, db, 0))
}

// Appends go on while retention deletes: they land above the horizon, far
// from the batches, and every one of them is delivered.
func TestAppendsDuringTrim(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	first := insertMany(t, b.db, 5000)
	consume(t, b)
	setPolicy(t, b.db, 0)

	done := make(chan struct{})
	appended := make(chan int64, 1)
	go func() {
		var last int64
		defer func() { appended <- last }()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := b.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('live', '{}') RETURNING global_sequence`).Scan(&last); err != nil {
				return
			}
		}
	}()
	plan, err := retention.Trim(ctx, b.db, &retention.Opts{BatchSize: 100})
	close(done)
	last := <-appended
	require.NoError(t, err)
	require.Equal(t, first, plan.Through, "the pool had passed the first 5000; the live ones wait for it")
	require.Greater(t, last, first, "events were appended meanwhile")

	consume(t, b)
	jobs, _ := fanouttest.Jobs(t, b.db, "p1")
	for seq := first + 1; seq <= last; seq++ {
		require.Equal(t, 1, jobs[seq], "event %d", seq)
	}
	require.Equal(t, last-first, eventCount(t, b.db, 0))
}

// The keep period runs on when the database appended an event, never on the
// occurred_at its appender chose: an event claiming to occur in 2099 does
// not hold the log (and every event after it) until then, and history
// imported with old times is kept as long as anything else appended now.
func TestKeepPeriodRunsOnAppendTime(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	for _, occurred := range []string{"2000-01-01", "2000-01-02", "2099-01-01", "now", "2000-01-03", "2099-06-01", "now"} {
		_, err := b.db.Exec(ctx, `INSERT INTO riverbus_event (type, data, occurred_at) VALUES ('thing.happened', '{}', $1::timestamptz)`, occurred)
		require.NoError(t, err)
	}
	consume(t, b)
	setPolicy(t, b.db, time.Hour)

	// Every event was appended just now: the keep period holds them all,
	// whatever they claim about when they occurred.
	plan, err := retention.Plan(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, bustype.RetentionStopKeep, plan.StoppedBy, "%+v", plan)
	require.Zero(t, plan.Events)
	plan, err = retention.Trim(ctx, b.db, nil)
	require.NoError(t, err)
	require.Zero(t, plan.Events)
	require.Equal(t, int64(7), eventCount(t, b.db, 0))

	// Two hours on, every one of them is past the keep period: the 2099
	// ones go with the rest, up to the floor.
	later := time.Now().Add(2 * time.Hour)
	clock := func() time.Time { return later }
	plan, err = retention.Plan(ctx, b.db, &retention.Opts{Now: clock})
	require.NoError(t, err)
	require.Equal(t, int64(7), plan.Events, "%+v", plan)
	// The plan reports when the events were appended, the time the keep
	// period runs on, not the times their appenders claimed.
	require.NotNil(t, plan.Oldest)
	require.NotNil(t, plan.Newest)
	require.WithinDuration(t, time.Now(), *plan.Oldest, 10*time.Minute)
	require.WithinDuration(t, time.Now(), *plan.Newest, 10*time.Minute)
	plan, err = retention.Trim(ctx, b.db, &retention.Opts{Now: clock})
	require.NoError(t, err)
	require.Equal(t, int64(7), plan.Through)
	require.Equal(t, bustype.RetentionStopFloor, plan.StoppedBy)
	require.Zero(t, eventCount(t, b.db, 0))
}

// Retention deletes the horizon's marks below where the log now begins,
// keeping the first that reaches it (a rewind to an older mark would owe
// events it deleted): a rewind to a time before that mark is refused,
// saying from when rewinds are exact, and one to it is exact. A dry run
// deletes none.
func TestTrimDeletesMarksBelowTheLogStart(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	fanouttest.CreatePool(t, b.db, bustype.PoolParams{Name: "p1"})
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	appendEvents(t, b.db, 20, base) // event i appended at base + i minutes
	consume(t, b)
	// Marks through 0, 5, 10, 12, 15 and 20, each half a minute after the
	// event after it was appended.
	_, err := b.db.Exec(ctx, `DELETE FROM riverbus_horizon_mark`)
	require.NoError(t, err)
	markAt := func(through int64) time.Time { return base.Add(time.Duration(through+1)*time.Minute + 30*time.Second) }
	for _, through := range []int64{0, 5, 10, 12, 15, 20} {
		_, err := b.db.Exec(ctx, `INSERT INTO riverbus_horizon_mark (at, committed_through) VALUES ($1, $2)`, markAt(through), through)
		require.NoError(t, err)
	}
	marks := func() []int64 {
		rows, err := b.db.Query(ctx, `SELECT committed_through FROM riverbus_horizon_mark ORDER BY at`)
		require.NoError(t, err)
		through, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return through
	}
	_, err = pools.Reset(ctx, b.db, "p1", 12) // the floor: the log will begin after 12
	require.NoError(t, err)
	setPolicy(t, b.db, 0)

	_, err = retention.Plan(ctx, b.db, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 5, 10, 12, 15, 20}, marks(), "the dry run deleted marks")
	done, err := retention.Trim(ctx, b.db, &retention.Opts{BatchSize: 5})
	require.NoError(t, err)
	require.Equal(t, int64(12), done.Policy.TrimmedThrough)
	require.Equal(t, []int64{12, 15, 20}, marks())

	// After event 13 was appended (the log's start) but before the mark
	// of 12: which events committed after it is not known any more.
	_, err = pools.ResetReplayToTime(ctx, b.db, "p1", markAt(12).Add(-10*time.Second))
	var rewindErr *bustype.RewindTimeError
	require.ErrorAs(t, err, &rewindErr)
	require.Equal(t, bustype.RewindNotExact, rewindErr.Reason)
	require.True(t, markAt(12).Equal(rewindErr.ExactFrom), "exact from %s, want %s", rewindErr.ExactFrom, markAt(12))
	require.Equal(t, int64(13), rewindErr.FirstSequence)
	r, err := pools.ResetReplayToTime(ctx, b.db, "p1", markAt(12))
	require.NoError(t, err)
	require.Equal(t, int64(12), r.After)
	// Before event 13 was appended: before the log's start.
	_, err = pools.ResetReplayToTime(ctx, b.db, "p1", base.Add(13*time.Minute-time.Second))
	require.ErrorAs(t, err, &rewindErr)
	require.Equal(t, bustype.RewindBeforeStart, rewindErr.Reason)
}
