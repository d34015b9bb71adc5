package fanout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	db *pgxpool.Pool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{db: pgtest.NewPool(t)}
}

// The helpers shared with other packages' tests (internal/fanouttest).
var (
	quietLogger = fanouttest.QuietLogger
	newFanout   = fanouttest.NewFanout
	runFanout   = fanouttest.RunFanout
	createPool  = fanouttest.CreatePool
	appendEvent = fanouttest.AppendEvent
	openWriter  = fanouttest.OpenWriter
	jobs        = fanouttest.Jobs
	horizon     = fanouttest.Horizon
	pass        = fanouttest.Pass
)

const insertEvent = fanouttest.InsertEvent

func TestOutOfOrderCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pa"})
	createPool(t, b.db, bustype.PoolParams{Name: "pb"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})

	txA, n := openWriter(t, b.db)
	n1 := appendEvent(t, b.db, "later") // tx B: commits first
	require.Equal(t, n+1, n1)

	pass(t, f)
	require.Equal(t, n-1, horizon(t, b.db).Horizon, "horizon must stop below the uncommitted N")
	for _, pool := range []string{"pa", "pb"} {
		counts, _ := jobs(t, b.db, pool)
		require.Empty(t, counts, "nothing past the hole may be fanned out")
	}

	require.NoError(t, txA.Commit(ctx))
	pass(t, f)
	require.Equal(t, n1, horizon(t, b.db).Horizon)
	for _, pool := range []string{"pa", "pb"} {
		counts, late := jobs(t, b.db, pool)
		require.Equal(t, map[int64]int{n: 1, n1: 1}, counts, pool)
		require.False(t, late[n])
		p, err := pools.Get(ctx, b.db, pool)
		require.NoError(t, err)
		require.Equal(t, n1, p.Cursor)
		require.Equal(t, int64(2), p.EventsFannedOut)
	}
}

func TestInFlightGapHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour, GapCheckInterval: 5 * time.Millisecond})
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)

	before := appendEvent(t, b.db, "before")
	s.Pools.TestSignals.BatchDone.WaitFor("event before the hole fanned out", func(r fanout.BatchResult) bool {
		return r.Cursor >= before
	})
	txA, n := openWriter(t, b.db)
	after := appendEvent(t, b.db, "after")

	// Give the fan-out many rounds (at 5 ms each) to misbehave.
	s.Horizon.TestSignals.RoundDone.WaitFor("the gap recorded", func(r fanout.RoundResult) bool { return r.Holding })
	require.Equal(t, int64(1), horizon(t, b.db).OpenGaps)
	for range 20 {
		require.True(t, s.Horizon.TestSignals.RoundDone.WaitOrTimeout().Holding)
	}
	h := horizon(t, b.db)
	require.Equal(t, before, h.Horizon)
	require.Zero(t, h.GapsSkipped)
	require.Zero(t, h.Watching)
	c, _ := jobs(t, b.db, "pp")
	require.Equal(t, map[int64]int{before: 1}, c)

	require.NoError(t, txA.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, b.db, "pp")
		return len(c) == 3
	}, "both delivered after commit")
	c, late := jobs(t, b.db, "pp")
	require.Equal(t, map[int64]int{before: 1, n: 1, after: 1}, c)
	require.False(t, late[n])
	require.Zero(t, horizon(t, b.db).GapsSkipped)
}

func TestRolledBackGapIsProvenNotTimedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	// The gap timeout is far beyond the test: only the proof can pass the
	// gap.
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)

	txA, n := openWriter(t, b.db)
	after := appendEvent(t, b.db, "after")
	s.Horizon.TestSignals.RoundDone.WaitFor("the gap recorded", func(r fanout.RoundResult) bool { return r.Holding })
	require.Equal(t, int64(1), horizon(t, b.db).OpenGaps)

	require.NoError(t, txA.Rollback(ctx))
	rolledBack := time.Now()
	round := s.Horizon.TestSignals.RoundDone.WaitFor("the rolled-back gap proven", func(r fanout.RoundResult) bool { return r.ProvenDead > 0 })
	t.Logf("rolled-back gap passed %s after the rollback", time.Since(rolledBack)) // a measure, not a test
	require.GreaterOrEqual(t, round.Horizon, after)

	h := horizon(t, b.db)
	require.Equal(t, int64(1), h.GapsProvenDead)
	require.Zero(t, h.GapsSkipped)
	require.Zero(t, h.Watching)
	testwait.Eventually(t, 5*time.Second, func() bool {
		c, _ := jobs(t, b.db, "pp")
		return c[after] == 1
	}, "event after the gap delivered")
	c, _ := jobs(t, b.db, "pp")
	require.Equal(t, map[int64]int{after: 1}, c)
	require.NotContains(t, c, n)
}

// A long transaction that holds an xid but writes no event does not stall
// the proof (it holds no lock on riverbus_event): a rolled-back gap still
// passes at once.
func TestUnrelatedLongTransactionDoesNotStallProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})

	pinned, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer pinned.Rollback(ctx) //nolint:errcheck
	_, err = pinned.Exec(ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)
	// It even reads the event table.
	_, err = pinned.Exec(ctx, "SELECT count(*) FROM riverbus_event")
	require.NoError(t, err)

	txA, _ := openWriter(t, b.db)
	after := appendEvent(t, b.db, "after")
	pass(t, f) // records the gap
	require.NoError(t, txA.Rollback(ctx))
	// Usually the next round proves it; a transaction of a parallel test
	// that ends between a round's snapshot and its pg_locks read can defer
	// the proof by a round. The gap timeout is an hour, so only the proof
	// can pass it.
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return horizon(t, b.db).Horizon == after
	}, "rolled-back gap proven")
	h := horizon(t, b.db)
	require.Equal(t, int64(1), h.GapsProvenDead)
	require.Zero(t, h.GapsSkipped)
}

// A transaction that could be a writer (it holds an xid and a RowExclusive
// lock on riverbus_event) and stays open: a rolled-back gap cannot be
// proven while it runs, so it is passed after the gap timeout, recorded as
// skipped and counted; once the transaction ends, the skipped sequence is
// proven dead and forgotten.
func TestPinnedSnapshotFallsBackToTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})
	clock := fanouttest.Clock(f)

	pinned, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer pinned.Rollback(ctx) //nolint:errcheck
	_, err = pinned.Exec(ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)
	_, err = pinned.Exec(ctx, "LOCK TABLE riverbus_event IN ROW EXCLUSIVE MODE")
	require.NoError(t, err)

	txA, n := openWriter(t, b.db)
	after := appendEvent(t, b.db, "after")
	pass(t, f) // records the gap
	require.NoError(t, txA.Rollback(ctx))

	pass(t, f)
	require.Equal(t, n-1, horizon(t, b.db).Horizon, "the pinned xid must keep the proof from passing")
	clock.Advance(59 * time.Minute)
	pass(t, f)
	require.Equal(t, n-1, horizon(t, b.db).Horizon, "held until the gap timeout")
	require.Zero(t, f.Stats().GapsSkipped)
	clock.Advance(time.Minute)
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)
	s.Horizon.TestSignals.RoundDone.WaitFor("gap skipped by timeout", func(r fanout.RoundResult) bool { return r.Skipped > 0 })
	require.GreaterOrEqual(t, horizon(t, b.db).Horizon, after)
	require.Equal(t, int64(1), f.Stats().GapsSkipped, "the round is counted before its signal")

	h := horizon(t, b.db)
	require.Equal(t, int64(1), h.GapsSkipped)
	require.Zero(t, h.GapsProvenDead)
	require.Equal(t, int64(1), h.Watching)

	require.NoError(t, pinned.Rollback(ctx))
	appendEvent(t, b.db, "wake")
	s.Horizon.TestSignals.RoundDone.WaitFor("skipped sequence forgotten", func(r fanout.RoundResult) bool { return r.Forgotten > 0 })
	require.Zero(t, horizon(t, b.db).Watching)
	// The pool is fanned out in a loop of its own, after the horizon moved.
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, b.db, "pp")
		return c[after] > 0
	}, "the pool's job")
	c, _ := jobs(t, b.db, "pp")
	require.NotContains(t, c, n)
	require.Equal(t, 1, c[after])
}

func TestLateEventDeliveredOnceToEveryPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pa"})
	createPool(t, b.db, bustype.PoolParams{Name: "pb"})
	createPool(t, b.db, bustype.PoolParams{Name: "other-type", EventTypes: []string{"nope"}})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour, GapCheckInterval: 5 * time.Millisecond})
	clock := fanouttest.Clock(f)
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)

	txA, n, after := skipHeldGap(t, b, s, clock, "pa", "pb")
	require.Equal(t, int64(1), horizon(t, b.db).GapsSkipped)

	require.NoError(t, txA.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		ca, _ := jobs(t, b.db, "pa")
		cb, _ := jobs(t, b.db, "pb")
		return ca[n] == 1 && cb[n] == 1
	}, "late event delivered")
	s.Retirer.TestSignals.Retired.WaitFor("late record retired", func(n int64) bool { return n > 0 })
	testwait.Eventually(t, time.Minute, func() bool {
		var left int
		require.NoError(t, b.db.QueryRow(ctx, "SELECT (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late)").Scan(&left))
		return left == 0
	}, "skipped range forgotten")
	// More passes change nothing.
	for range 5 {
		pass(t, f)
	}
	for _, pool := range []string{"pa", "pb"} {
		c, late := jobs(t, b.db, pool)
		require.Equal(t, map[int64]int{n: 1, after: 1}, c, pool)
		require.True(t, late[n], "late job flagged")
		require.False(t, late[after])
		p, err := pools.Get(ctx, b.db, pool)
		require.NoError(t, err)
		require.Equal(t, int64(1), p.LateEventsDelivered)
	}
	c, _ := jobs(t, b.db, "other-type")
	require.Empty(t, c)
	require.Equal(t, int64(1), horizon(t, b.db).LateEvents)
	require.Equal(t, int64(1), f.Stats().LateEvents)
	require.Equal(t, int64(1), f.Stats().LateDelivered["pa"])
}

// skipHeldGap opens a writer that holds sequence n, appends after above
// it, waits for the running fan-out to record the gap, moves the test clock
// past the gap timeout and waits until every pool has after's job. The
// writer is left open: its commit makes n a late event.
func skipHeldGap(t *testing.T, b *testBundle, s *fanout.Services, clock *fanout.Clock, pools ...string) (txA pgx.Tx, n, after int64) {
	t.Helper()
	txA, n = openWriter(t, b.db)
	after = appendEvent(t, b.db, "after")
	s.Horizon.TestSignals.RoundDone.WaitFor("the gap recorded", func(r fanout.RoundResult) bool { return r.Holding })
	clock.Advance(time.Hour)
	testwait.Eventually(t, time.Minute, func() bool {
		for _, pool := range pools {
			if c, _ := jobs(t, b.db, pool); c[after] != 1 {
				return false
			}
		}
		return true
	}, "gap skipped and later event delivered")
	return txA, n, after
}

// A pool reset forward past a skipped sequence does not get it when it
// commits late: it is before the pool's start point. A pool that was not
// reset does. The late record is retired all the same.
func TestLateEventBeforeResetPointNotDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "kept"})
	createPool(t, b.db, bustype.PoolParams{Name: "moved"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour, GapCheckInterval: 5 * time.Millisecond})
	clock := fanouttest.Clock(f)
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)

	txA, n, after := skipHeldGap(t, b, s, clock, "kept", "moved")
	_, err := pools.Reset(ctx, b.db, "moved", after)
	require.NoError(t, err)
	require.NoError(t, txA.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		ck, _ := jobs(t, b.db, "kept")
		return ck[n] == 1
	}, "late event delivered to the pool that kept its start")
	testwait.Eventually(t, time.Minute, func() bool {
		var left int
		require.NoError(t, b.db.QueryRow(ctx, "SELECT (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late)").Scan(&left))
		return left == 0
	}, "late record retired")
	cm, _ := jobs(t, b.db, "moved")
	require.Equal(t, map[int64]int{after: 1}, cm, "the reset pool starts after %d", after)
}

// Three Fanout instances, 50 writers x 20 events with random commit delays
// and 10% rollbacks: every committed event becomes exactly one job per
// matching pool, and no rolled-back one does.
func TestBurstWithRollbacksAndSeveralFanouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	b := &testBundle{db: pgtest.Connect(t, url)}
	createPool(t, b.db, bustype.PoolParams{Name: "all"})
	createPool(t, b.db, bustype.PoolParams{Name: "all-2"})
	createPool(t, b.db, bustype.PoolParams{Name: "odd", EventTypes: []string{"odd"}})
	// The fan-outs get their own connections, as they would in their own
	// processes, so 50 writers cannot starve them; the gap timeout is far
	// above the test's length, so any gap passed must have been proven.
	for range 3 {
		runFanout(t, newFanout(t, pgtest.Connect(t, url), fanout.Config{BatchSize: 50, GapTimeout: time.Minute}))
	}

	var (
		mu        sync.Mutex
		committed = map[int64]string{}
		rolled    = map[int64]bool{}
		wg        sync.WaitGroup
	)
	for w := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				typ := "even"
				if (w+i)%2 == 1 {
					typ = "odd"
				}
				tx, err := b.db.Begin(ctx)
				if !assertNoError(t, err) {
					return
				}
				var seq int64
				if !assertNoError(t, tx.QueryRow(ctx, insertEvent, typ, "k", []string{}).Scan(&seq)) {
					return
				}
				time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
				if rand.IntN(10) == 0 {
					assertNoError(t, tx.Rollback(ctx))
					mu.Lock()
					rolled[seq] = true
					mu.Unlock()
					continue
				}
				if assertNoError(t, tx.Commit(ctx)) {
					mu.Lock()
					committed[seq] = typ
					mu.Unlock()
				}
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	t.Logf("writers done in %s", time.Since(start))
	require.NotEmpty(t, rolled)

	odd := 0
	for _, typ := range committed {
		if typ == "odd" {
			odd++
		}
	}
	testwait.Eventually(t, 60*time.Second, func() bool {
		a, _ := jobs(t, b.db, "all")
		a2, _ := jobs(t, b.db, "all-2")
		o, _ := jobs(t, b.db, "odd")
		return len(a) == len(committed) && len(a2) == len(committed) && len(o) == odd
	}, "every committed event fanned out")
	t.Logf("all fanned out %s after start", time.Since(start))
	for _, pool := range []string{"all", "all-2", "odd"} {
		c, _ := jobs(t, b.db, pool)
		for seq, n := range c {
			require.Equal(t, 1, n, "pool %s seq %d duplicated", pool, seq)
			typ, ok := committed[seq]
			require.True(t, ok, "pool %s has a job for seq %d that never committed", pool, seq)
			if pool == "odd" {
				require.Equal(t, "odd", typ)
			}
		}
	}
	require.Zero(t, horizon(t, b.db).GapsSkipped, "rollbacks must be proven, not timed out")
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestCatchUpAndLiveHandOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var old []int64
	for range 25 {
		old = append(old, appendEvent(t, b.db, "t"))
	}
	createPool(t, b.db, bustype.PoolParams{Name: "from-beginning", From: bustype.FromBeginning})
	createPool(t, b.db, bustype.PoolParams{Name: "from-now", From: bustype.FromNow})
	createPool(t, b.db, bustype.PoolParams{Name: "from-seq", From: bustype.FromSequence(old[9])})
	f := newFanout(t, b.db, fanout.Config{BatchSize: 7})
	runFanout(t, f)

	var live []int64
	for range 10 {
		live = append(live, appendEvent(t, b.db, "t"))
	}
	all := append(append([]int64{}, old...), live...)
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, b.db, "from-beginning")
		c2, _ := jobs(t, b.db, "from-now")
		return len(c) == len(all) && len(c2) == len(live)
	}, "all fanned out")
	expect := func(seqs []int64) map[int64]int {
		m := map[int64]int{}
		for _, s := range seqs {
			m[s] = 1
		}
		return m
	}
	c, _ := jobs(t, b.db, "from-beginning")
	require.Equal(t, expect(all), c)
	c, _ = jobs(t, b.db, "from-now")
	require.Equal(t, expect(live), c)
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, b.db, "from-seq")
		return len(c) == len(all)-10
	}, "from-seq fanned out")
	c, _ = jobs(t, b.db, "from-seq")
	require.Equal(t, expect(all[10:]), c)
	p, err := pools.Get(ctx, b.db, "from-now")
	require.NoError(t, err)
	require.Equal(t, live[len(live)-1], p.Cursor)
}

func TestFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "orders", EventTypes: []string{"order.placed", "order.paid"}})
	createPool(t, b.db, bustype.PoolParams{Name: "eu", Tags: []string{"region=eu"}})
	createPool(t, b.db, bustype.PoolParams{Name: "eu-paid", EventTypes: []string{"order.paid"}, Tags: []string{"region=eu", "tier=gold"}})
	f := newFanout(t, b.db, fanout.Config{})

	placedEU := appendEvent(t, b.db, "order.placed", "region=eu")
	paidUS := appendEvent(t, b.db, "order.paid", "region=us", "tier=gold")
	paidEUGold := appendEvent(t, b.db, "order.paid", "region=eu", "tier=gold")
	paidEU := appendEvent(t, b.db, "order.paid", "region=eu")
	shipped := appendEvent(t, b.db, "order.shipped")
	pass(t, f)

	c, _ := jobs(t, b.db, "orders")
	require.Equal(t, map[int64]int{placedEU: 1, paidUS: 1, paidEUGold: 1, paidEU: 1}, c)
	c, _ = jobs(t, b.db, "eu")
	require.Equal(t, map[int64]int{placedEU: 1, paidEUGold: 1, paidEU: 1}, c)
	c, _ = jobs(t, b.db, "eu-paid")
	require.Equal(t, map[int64]int{paidEUGold: 1}, c)
	for _, name := range []string{"orders", "eu", "eu-paid"} {
		p, err := pools.Get(ctx, b.db, name)
		require.NoError(t, err)
		require.Equal(t, shipped, p.Cursor, "cursor advances past non-matching events")
	}
}

func TestJobLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "billing.v2", MaxAttempts: 3, Priority: 2})
	seq := appendEvent(t, b.db, "invoice.created", "a=b")
	pass(t, newFanout(t, b.db, fanout.Config{}))

	var kind, queue string
	var maxAttempts, priority int
	var args map[string]any
	require.NoError(t, b.db.QueryRow(ctx, `SELECT kind, queue, max_attempts, priority, args FROM river_job`).
		Scan(&kind, &queue, &maxAttempts, &priority, &args))
	require.Equal(t, "billing.v2", kind)
	require.Equal(t, "billing_v2", queue)
	require.Equal(t, 3, maxAttempts)
	require.Equal(t, 2, priority)
	require.Equal(t, float64(seq), args["global_sequence"])
	require.Equal(t, "invoice.created", args["type"])
	require.Equal(t, "k", args["key"])
	require.Equal(t, []any{"a=b"}, args["tags"])
	require.Equal(t, map[string]any{"n": float64(1)}, args["data"])
	require.Equal(t, map[string]any{}, args["metadata"])
	require.NotEmpty(t, args["event_id"])
	require.NotEmpty(t, args["occurred_at"])
	require.NotContains(t, args, "late")
}

func TestPausedPoolIsNotFannedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{})
	_, _, err := pools.SetStatus(ctx, b.db, "pp", bustype.PoolPaused)
	require.NoError(t, err)
	seq := appendEvent(t, b.db, "t")
	pass(t, f)
	c, _ := jobs(t, b.db, "pp")
	require.Empty(t, c)
	_, _, err = pools.SetStatus(ctx, b.db, "pp", bustype.PoolActive)
	require.NoError(t, err)
	pass(t, f)
	c, _ = jobs(t, b.db, "pp")
	require.Equal(t, map[int64]int{seq: 1}, c)
}

func TestPoolAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	p, created, err := pools.Create(ctx, b.db, bustype.PoolParams{Name: "billing", EventTypes: []string{"b", "a", "a"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, []string{"a", "b"}, p.EventTypes)
	require.Equal(t, "billing", p.Queue)
	require.Equal(t, bustype.MaxAttemptsDefault, p.MaxAttempts)
	require.Equal(t, bustype.PoolActive, p.Status)

	// Same settings: no-op.
	_, created, err = pools.Create(ctx, b.db, bustype.PoolParams{Name: "billing", EventTypes: []string{"a", "b"}})
	require.NoError(t, err)
	require.False(t, created)

	// Other settings: refused unless Update.
	_, _, err = pools.Create(ctx, b.db, bustype.PoolParams{Name: "billing", MaxAttempts: 3})
	require.ErrorIs(t, err, bustype.ErrPoolExists)
	p, created, err = pools.Create(ctx, b.db, bustype.PoolParams{Name: "billing", MaxAttempts: 3, Update: true})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 3, p.MaxAttempts)
	require.Empty(t, p.EventTypes)

	for _, bad := range []bustype.PoolParams{
		{Name: ""},
		{Name: "x"}, // River refuses one-character kinds
		{Name: "has space"},
		{Name: "drop;table"},
		{Name: string(make([]byte, 101))},
		{Name: "ok", Queue: "Bad Queue"},
		{Name: "ok", Tags: []string{"novalue"}},
		{Name: "ok", MaxAttempts: -1},
		{Name: "ok", Priority: 5},
	} {
		_, _, err := pools.Create(ctx, b.db, bad)
		require.ErrorIs(t, err, bustype.ErrInvalidPool, "%+v", bad)
	}

	_, err = pools.Get(ctx, b.db, "nope")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	require.Contains(t, err.Error(), "billing")

	_, err = bustype.ParseStartPosition("yesterday")
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	pos, err := bustype.ParseStartPosition("42")
	require.NoError(t, err)
	require.Equal(t, "42", pos.String())

	require.Equal(t, "billing_v2", bustype.DefaultQueue("Billing.v2"))
	require.Equal(t, "a_b", bustype.DefaultQueue("a::b"))
	require.Equal(t, "now", bustype.FromNow.String())
	require.Equal(t, "beginning", bustype.StartPosition{}.String(), "zero value is the beginning")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	for _, cfg := range []fanout.Config{
		{GapTimeout: -time.Second},
		{BatchSize: -1},
		{BatchSize: 1_000_000},
		{Workers: -2},
	} {
		_, err := fanout.New(db, &cfg)
		require.Error(t, err)
	}
	_, err := fanout.New(nil, nil)
	require.Error(t, err)
}

// The ordering that a bound of pg_snapshot_xmax gets wrong (see horizon.go):
// H takes its xid first, G takes a newer one, G takes sequence N, H takes
// N+1 and commits. G's xid is then above every completed xid, so it is in
// no snapshot's xip list. The gap must still be held until G commits.
func TestGapHeldForWriterWithNewestXid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})

	txH, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer txH.Rollback(ctx) //nolint:errcheck
	_, err = txH.Exec(ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)
	txG, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer txG.Rollback(ctx) //nolint:errcheck
	_, err = txG.Exec(ctx, "SELECT pg_current_xact_id()")
	require.NoError(t, err)

	n := appendEvent(t, txG, "g")
	n1 := appendEvent(t, txH, "h")
	require.Equal(t, n+1, n1)
	require.NoError(t, txH.Commit(ctx))

	for range 20 {
		pass(t, f)
	}
	require.Equal(t, n-1, horizon(t, b.db).Horizon, "a running writer's gap must never be passed as proven")
	require.Zero(t, horizon(t, b.db).GapsProvenDead)

	require.NoError(t, txG.Commit(ctx))
	pass(t, f)
	c, _ := jobs(t, b.db, "pp")
	require.Equal(t, map[int64]int{n: 1, n1: 1}, c)
}

// A new pool created "from beginning" while a hole is held delivers every
// event once: those committed before it, the held one when it commits, and
// the later ones (epoch delivered rows twice here).
func TestNewPoolFromBeginningOverAHole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "old"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})
	before := appendEvent(t, b.db, "t")
	txA, held := openWriter(t, b.db)
	after := appendEvent(t, b.db, "t")
	pass(t, f)

	createPool(t, b.db, bustype.PoolParams{Name: "new", From: bustype.FromBeginning})
	pass(t, f)
	c, _ := jobs(t, b.db, "new")
	require.Equal(t, map[int64]int{before: 1}, c, "nothing past the hole yet")
	require.NoError(t, txA.Commit(ctx))
	later := appendEvent(t, b.db, "t")
	for range 3 {
		pass(t, f)
	}
	want := map[int64]int{before: 1, held: 1, after: 1, later: 1}
	c, _ = jobs(t, b.db, "new")
	require.Equal(t, want, c)
	c, _ = jobs(t, b.db, "old")
	require.Equal(t, want, c)
}

// After a dump and restore the xid counter starts again, so a recorded gap
// bound can be far above every xid the new cluster hands out. Such a gap
// must not stall the horizon: it cannot be proven, so the gap timeout
// passes it (and watches it).
func TestGapWithXidBoundFromAnotherClusterDoesNotStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: 300 * time.Millisecond})
	txA, n := openWriter(t, b.db)
	after := appendEvent(t, b.db, "t")
	require.NoError(t, txA.Rollback(ctx))
	// The gap as an older cluster with a far higher xid counter recorded it.
	_, err := b.db.Exec(ctx, `INSERT INTO riverbus_gap (first_sequence, last_sequence, xid_bound, first_seen_at)
		VALUES ($1, $1, '1099511627776'::xid8, now() - interval '1 second')`, n)
	require.NoError(t, err)
	runFanout(t, f)
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, b.db, "pp")
		return horizon(t, b.db).Horizon >= after && c[after] == 1
	}, "horizon past the gap and the event delivered")
	require.Equal(t, int64(1), horizon(t, b.db).GapsSkipped, "passed by the timeout, watched")
}

// A skipped sequence commits while one pool has not yet reached it: that
// pool delivers it on its normal path in a later pass, with no late event
// left to trigger anything. The late record must still be retired, or the
// horizon watches it for ever.
func TestLateEventRetiredWhenLaggingPoolReadsItNormally(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "ahead"})
	createPool(t, b.db, bustype.PoolParams{Name: "behind"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})
	clock := fanouttest.Clock(f)

	_, _, err := pools.SetStatus(ctx, b.db, "behind", bustype.PoolPaused)
	require.NoError(t, err)
	txA, n := openWriter(t, b.db)
	after := appendEvent(t, b.db, "after")
	pass(t, f) // records the gap at n
	clock.Advance(time.Hour)
	pass(t, f) // skips n, "ahead" gets after
	require.NoError(t, txA.Commit(ctx))
	pass(t, f) // n is late: "ahead" gets it late; "behind" is paused
	ca, late := jobs(t, b.db, "ahead")
	require.Equal(t, map[int64]int{n: 1, after: 1}, ca)
	require.True(t, late[n])

	_, _, err = pools.SetStatus(ctx, b.db, "behind", bustype.PoolActive)
	require.NoError(t, err)
	for range 3 {
		pass(t, f)
	}
	cb, lateB := jobs(t, b.db, "behind")
	require.Equal(t, map[int64]int{n: 1, after: 1}, cb)
	require.False(t, lateB[n], "the lagging pool read it in order: not late for it")
	// The range is forgotten once the round's snapshot proves its writer
	// ended; xids are the cluster's, so another test's open transaction on
	// this server can delay that by a pass or more.
	testwait.Eventually(t, time.Minute, func() bool {
		var left int
		require.NoError(t, b.db.QueryRow(ctx, "SELECT (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late)").Scan(&left))
		if left == 0 {
			return true
		}
		pass(t, f)
		return false
	}, "late record retired once every pool handled it")
}

// A release that takes two lane buckets shared in the wrong order (River's
// batch completer finishing jobs of two keys in one statement) while a
// batch waits for them in bucket order: the batch must step back and let the
// release through rather than deadlock (PostgreSQL would abort one side
// after deadlock_timeout with 40P01, failing the batch or the completion).
func TestLaneLockYieldsToMultiBucketRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "ord", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{})

	// Two keys in different buckets: lo's bucket sorts first.
	var lo, hi string
	var loBucket, hiBucket int
	for i := 0; hi == ""; i++ {
		k := fmt.Sprintf("key-%d", i)
		var bk int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT riverbus_lane_bucket($1)`, k).Scan(&bk))
		switch {
		case lo == "":
			lo, loBucket = k, bk
		case bk > loBucket:
			hi, hiBucket = k, bk
		case bk < loBucket:
			hi, hiBucket = lo, loBucket
			lo, loBucket = k, bk
		}
	}
	for _, k := range []string{lo, hi} {
		_, err := b.db.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', $1, '{}')`, k)
		require.NoError(t, err)
	}
	for horizon(t, b.db).Horizon < 2 {
		_, err := fanout.Advance(ctx, b.db, fanout.RoundParams{GapTimeout: time.Second, PageSize: 100})
		require.NoError(t, err)
	}

	release, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer release.Rollback(ctx) //nolint:errcheck
	// What a release takes: the bucket's row lock, shared.
	lockShared := `SELECT 1 FROM riverbus_lane_lock WHERE pool = 'ord' AND bucket = $1 FOR SHARE`
	_, err = release.Exec(ctx, lockShared, hiBucket)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, _, err := f.FanOutPool(ctx, "ord")
		done <- err
	}()
	testwait.Eventually(t, time.Minute, func() bool {
		var waiting int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, "the batch waits for the busy bucket")
	_, err = release.Exec(ctx, lockShared, loBucket) // closes the cycle
	require.NoError(t, err, "the release gets its second bucket")
	require.NoError(t, release.Commit(ctx))
	require.NoError(t, <-done, "the batch succeeds once the release is through")
	c, _ := jobs(t, b.db, "ord")
	require.Len(t, c, 2)
}
