package fanout_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	hz "github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
)

// newStrictDatabase returns a database whose sessions are ended when they
// sit idle in a transaction for 5 s, as a DBA may configure, and a pool on
// it.
func newStrictDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L', current_database(), '5s');
	END $$`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))
	db := pgtest.Connect(t, url)
	var setting string
	require.NoError(t, db.QueryRow(context.Background(), "SHOW idle_in_transaction_session_timeout").Scan(&setting))
	require.Equal(t, "5s", setting)
	return url, db
}

// logBuffer collects log output written from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// A setval far ahead leaves a gap of 10^15 numbers. The horizon proves it
// in a round or two, as one gap row, and reaches the event above it. The
// same jump over a writer still open is skipped as one range, and that
// writer's event is delivered late, once.
func TestSequenceJumpIsOneRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := newStrictDatabase(t)
	createPool(t, db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, db, fanout.Config{GapTimeout: time.Hour})
	clock := fanouttest.Clock(f)

	first := appendEvent(t, db, "t")
	_, err := db.Exec(ctx, "SELECT setval('riverbus_event_global_sequence', $1::bigint)", first+1e15)
	require.NoError(t, err)
	above := appendEvent(t, db, "t")
	require.Equal(t, first+1e15+1, above)
	start := time.Now()
	for range 3 {
		pass(t, f)
	}
	t.Logf("three passes over a jump of 10^15: %s", time.Since(start)) // a measure, not a test
	h := horizon(t, db)
	require.Equal(t, above, h.Horizon, "the horizon passed the jump")
	require.Equal(t, int64(1e15), h.GapsProvenDead)
	require.Zero(t, h.OpenGaps)
	c, _ := jobs(t, db, "pp")
	require.Equal(t, map[int64]int{first: 1, above: 1}, c)

	// A second jump while a writer holds the number below it.
	txA, held := openWriter(t, db)
	_, err = db.Exec(ctx, "SELECT setval('riverbus_event_global_sequence', $1::bigint)", held+1e15)
	require.NoError(t, err)
	top := appendEvent(t, db, "t")
	pass(t, f) // records the gap
	clock.Advance(time.Hour)
	s := fanouttest.InitSignals(t, f)
	runFanout(t, f)
	s.Horizon.TestSignals.RoundDone.WaitFor("jump skipped by the gap timeout", func(r fanout.RoundResult) bool { return r.Skipped > 0 })
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, db, "pp")
		return c[top] == 1
	}, "the event above the jump fanned out")
	require.Equal(t, int64(1), count(t, db, "SELECT count(*) FROM riverbus_skipped"), "one range for the whole run")
	require.Equal(t, int64(1e15+1), horizon(t, db).Watching)
	require.LessOrEqual(t, count(t, db, "SELECT count(*) FROM riverbus_gap"), int64(1))
	require.NoError(t, txA.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, db, "pp")
		return c[held] == 1 && count(t, db, "SELECT (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late)") == 0
	}, "late event delivered and its range forgotten")
	c, late := jobs(t, db, "pp")
	require.Equal(t, map[int64]int{first: 1, above: 1, held: 1, top: 1}, c)
	require.True(t, late[held])
	require.Equal(t, int64(1), horizon(t, db).LateEvents)

	// A jump to 9e18, near the sequence's end, is no different.
	_, err = db.Exec(ctx, "SELECT setval('riverbus_event_global_sequence', 9000000000000000000)")
	require.NoError(t, err)
	last := appendEvent(t, db, "t")
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, db, "pp")
		return c[last] == 1
	}, "horizon past a jump to 9e18")
	require.Equal(t, last, horizon(t, db).Horizon)
}

// An appender takes a sequence for an event, burns 100,000 more numbers
// and holds its transaction open past the gap timeout: one skipped range,
// the plain path stays on for a plain pool, and the event is delivered
// late, once, when the transaction commits.
func TestBurnedNumbersLeaveOneRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := newStrictDatabase(t)
	createPool(t, db, bustype.PoolParams{Name: "plain"})
	createPool(t, db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, db, fanout.Config{GapTimeout: time.Hour})
	clock := fanouttest.Clock(f)

	txA, held := openWriter(t, db)
	_, err := txA.Exec(ctx, "SELECT count(nextval('riverbus_event_global_sequence')) FROM generate_series(1, 100000)")
	require.NoError(t, err)
	after := appendEvent(t, db, "t")
	require.Equal(t, held+100_001, after)
	pass(t, f) // records the gap
	clock.Advance(time.Hour)
	pass(t, f) // skips it
	require.Equal(t, after, horizon(t, db).Horizon, "gap skipped")
	require.Equal(t, int64(1), count(t, db, "SELECT count(*) FROM riverbus_skipped"))
	require.Equal(t, int64(100_001), horizon(t, db).Watching)
	require.Equal(t, int64(1), horizon(t, db).WatchingRanges)
	// A range of numbers that never committed leaves the plain path on.
	next := appendEvent(t, db, "t")
	start := time.Now()
	pass(t, f)
	t.Logf("a pass with the range watched: %s", time.Since(start)) // a measure, not a test
	require.True(t, f.UsesPlainPath("plain"))
	for _, pool := range []string{"plain", "keyed"} {
		c, _ := jobs(t, db, pool)
		require.Equal(t, map[int64]int{after: 1, next: 1}, c, pool)
	}

	require.NoError(t, txA.Commit(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return count(t, db, "SELECT (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late) + (SELECT count(*) FROM riverbus_pool_late)") == 0
	}, "late event delivered and retired")
	for range 3 {
		pass(t, f)
	}
	for _, pool := range []string{"plain", "keyed"} {
		c, late := jobs(t, db, pool)
		require.Equal(t, map[int64]int{held: 1, after: 1, next: 1}, c, pool)
		require.True(t, late[held], pool)
	}
	h := horizon(t, db)
	require.Equal(t, int64(1), h.LateEvents)
	require.Equal(t, int64(100_001), h.GapsSkipped)
	require.True(t, f.UsesPlainPath("plain"), "plain path back once the late event is retired")
}

// With CACHE 10 a session hands out numbers it reserved before higher
// ones were committed by another session. The horizon must not prove them
// dead: it reports the problem, holds, and the event committed later with
// a cached number is delivered.
func TestCachedSequenceNumbersAreNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, url)
	createPool(t, db, bustype.PoolParams{Name: "pp"})
	logs := &logBuffer{}
	f := newFanout(t, db, fanout.Config{GapTimeout: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))})
	_, err := db.Exec(ctx, "ALTER SEQUENCE riverbus_event_global_sequence CACHE 10")
	require.NoError(t, err)

	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	a, b := connect(), connect()
	var s1, s2, s3 int64
	require.NoError(t, a.QueryRow(ctx, insertEvent, "t", "k", []string{}).Scan(&s1)) // caches s1..s1+9
	require.NoError(t, b.QueryRow(ctx, insertEvent, "t", "k", []string{}).Scan(&s2)) // caches the next ten
	require.Equal(t, s1+10, s2)
	for range 3 {
		pass(t, f) // the old horizon proved s1+1..s1+9 dead here
	}
	require.NoError(t, a.QueryRow(ctx, insertEvent, "t", "k", []string{}).Scan(&s3))
	require.Equal(t, s1+1, s3, "a cached number, below a committed one")
	for range 3 {
		pass(t, f)
	}
	c, _ := jobs(t, db, "pp")
	require.Equal(t, 1, c[s3], "the event with the cached number is delivered")
	h := horizon(t, db)
	require.Equal(t, s3, h.Horizon, "held at the cached numbers")
	require.Zero(t, h.GapsProvenDead)
	require.Len(t, h.Problems, 1)
	require.Equal(t, hz.ProblemSequenceCache, h.Problems[0].Code)
	require.Contains(t, h.Problems[0].Fix, "ALTER SEQUENCE riverbus_event_global_sequence CACHE 1")
	logged := logs.String()
	require.Contains(t, logged, "level=ERROR")
	require.Contains(t, logged, "problem=sequence_cache")
	require.Contains(t, logged, "ALTER SEQUENCE riverbus_event_global_sequence CACHE 1")

	// The fix: CACHE 1, and the session that cached numbers ended.
	_, err = db.Exec(ctx, "ALTER SEQUENCE riverbus_event_global_sequence CACHE 1")
	require.NoError(t, err)
	require.NoError(t, a.Close(ctx))
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return horizon(t, db).Horizon >= s2
	}, "horizon past the cached numbers")
	c, _ = jobs(t, db, "pp")
	require.Equal(t, map[int64]int{s1: 1, s3: 1, s2: 1}, c)
	require.Empty(t, horizon(t, db).Problems)
}

// setval backwards below the horizon: reported, and the horizon does not
// move; setval forward again (the repair in docs/operations.md) lets it go on.
func TestSequenceBelowHorizonIsReportedAndHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: 100 * time.Millisecond})
	var seqs []int64
	for range 5 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}
	pass(t, f)
	require.Equal(t, seqs[4], horizon(t, b.db).Horizon)

	_, err := b.db.Exec(ctx, "SELECT setval('riverbus_event_global_sequence', 2)")
	require.NoError(t, err)
	ps, err := hz.CheckAssumptions(ctx, b.db)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, hz.ProblemSequenceBelowHorizon, ps[0].Code)
	require.True(t, ps[0].Blocks)
	res := pass(t, f)
	require.Equal(t, hz.ProblemSequenceBelowHorizon, res.Horizon.Problems[0].Code)

	// The repair: the sequence back above every event and the horizon.
	_, err = b.db.Exec(ctx, "SELECT setval('riverbus_event_global_sequence', greatest((SELECT max(global_sequence) FROM riverbus_event), (SELECT horizon FROM riverbus_horizon)))")
	require.NoError(t, err)
	n := appendEvent(t, b.db, "t")
	pass(t, f)
	require.Equal(t, n, horizon(t, b.db).Horizon)
	require.Empty(t, horizon(t, b.db).Problems)
}

// A rolled-back gap is proven dead in the next round, unless the assign
// trigger is disabled (or gone, or changed): then it is held, whatever the
// gap timeout, and the problem is reported.
func TestBrokenTriggerHoldsTheHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: 50 * time.Millisecond})

	problems := func() []string {
		ps, err := hz.CheckAssumptions(ctx, b.db)
		require.NoError(t, err)
		var codes []string
		for _, p := range ps {
			codes = append(codes, p.Code)
		}
		return codes
	}
	require.Empty(t, problems(), "a freshly migrated database breaks no assumption")

	txA, n := openWriter(t, b.db)
	after := appendEvent(t, b.db, "t")
	require.NoError(t, txA.Rollback(ctx))
	pass(t, f) // records the gap
	_, err := b.db.Exec(ctx, "ALTER TABLE riverbus_event DISABLE TRIGGER riverbus_event_assign")
	require.NoError(t, err)
	require.Equal(t, []string{hz.ProblemAssignTriggerDisabled}, problems())
	// Past the gap timeout: only the problem holds the gap.
	_, err = b.db.Exec(ctx, "UPDATE riverbus_gap SET first_seen_at = now() - interval '1 hour'")
	require.NoError(t, err)
	for range 3 {
		res := pass(t, f)
		require.True(t, res.Horizon.Blocked)
		require.False(t, res.Holding, "no point in looking again within milliseconds")
	}
	h := horizon(t, b.db)
	require.Equal(t, n-1, h.Horizon)
	require.Zero(t, h.GapsProvenDead)
	require.Zero(t, h.GapsSkipped)
	_, err = b.db.Exec(ctx, "ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_assign")
	require.NoError(t, err)
	pass(t, f)
	require.Equal(t, after, horizon(t, b.db).Horizon)

	// Every other problem the check knows.
	for _, tc := range []struct{ sql, undo, code string }{
		{"ALTER SEQUENCE riverbus_event_global_sequence INCREMENT BY 2", "ALTER SEQUENCE riverbus_event_global_sequence INCREMENT BY 1", hz.ProblemSequenceIncrement},
		{"ALTER SEQUENCE riverbus_event_global_sequence CYCLE", "ALTER SEQUENCE riverbus_event_global_sequence NO CYCLE", hz.ProblemSequenceCycle},
		{"ALTER TABLE riverbus_event DISABLE TRIGGER riverbus_event_notify", "ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_notify", hz.ProblemNotifyTriggerMissing},
		{"ALTER TRIGGER riverbus_event_assign ON riverbus_event RENAME TO other", "ALTER TRIGGER other ON riverbus_event RENAME TO riverbus_event_assign", hz.ProblemAssignTriggerMissing},
		{`CREATE OR REPLACE FUNCTION riverbus_event_assign() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.global_sequence := nextval('riverbus_event_global_sequence');
  NEW.transaction_id := pg_current_xact_id();
  RETURN NEW;
END
$$`, "", hz.ProblemAssignTriggerChanged},
	} {
		_, err := b.db.Exec(ctx, tc.sql)
		require.NoError(t, err)
		require.Equal(t, []string{tc.code}, problems(), tc.sql)
		if tc.undo != "" {
			_, err = b.db.Exec(ctx, tc.undo)
			require.NoError(t, err)
			require.Empty(t, problems(), tc.undo)
		}
	}
	require.False(t, hz.ProblemBlocks(hz.ProblemNotifyTriggerMissing))
}

// The horizon row deleted while the fan-out runs: every pass fails with an
// error naming the repair, status says so, and the repair recreates it at
// a value from which every event is delivered once.
func TestHorizonRowDeletedAndRepaired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: 100 * time.Millisecond})
	var seqs []int64
	for range 3 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}
	pass(t, f)

	_, err := b.db.Exec(ctx, "DELETE FROM riverbus_horizon")
	require.NoError(t, err)
	for range 3 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}
	_, err = f.Pass(ctx)
	require.ErrorIs(t, err, bustype.ErrHorizonMissing)
	require.ErrorContains(t, err, "riverbus repair horizon")
	_, err = hz.Get(ctx, b.db)
	require.ErrorIs(t, err, bustype.ErrHorizonMissing)
	// A pool's batch says the same, from the database.
	_, _, err = f.FanOutPool(ctx, "keyed")
	require.ErrorContains(t, err, "riverbus_horizon has no row")

	res, err := hz.Repair(ctx, b.db)
	require.NoError(t, err)
	require.True(t, res.Created)
	require.Equal(t, seqs[2], res.Horizon, "the lowest pool cursor")
	again, err := hz.Repair(ctx, b.db)
	require.NoError(t, err)
	require.False(t, again.Created)

	runFanout(t, f)
	testwait.Eventually(t, time.Minute, func() bool {
		c, _ := jobs(t, b.db, "pp")
		k, _ := jobs(t, b.db, "keyed")
		return len(c) == len(seqs) && len(k) == len(seqs)
	}, "every event delivered")
	for _, pool := range []string{"pp", "keyed"} {
		c, _ := jobs(t, b.db, pool)
		for _, s := range seqs {
			require.Equal(t, 1, c[s], "%s: event %d once", pool, s)
		}
	}
}

// The repair never starts below a skipped range or a late event (a range
// walked twice could overlap a new one), nor above an open gap.
func TestRepairHorizonValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	repair := func() int64 {
		_, err := b.db.Exec(ctx, "DELETE FROM riverbus_horizon")
		require.NoError(t, err)
		res, err := hz.Repair(ctx, b.db)
		require.NoError(t, err)
		require.True(t, res.Created)
		return res.Horizon
	}
	require.Zero(t, repair(), "no pool, nothing known: 0")
	_, err := b.db.Exec(ctx, `INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ('pa', 0, 40), ('pb', 0, 50)`)
	require.NoError(t, err)
	require.Equal(t, int64(40), repair())
	_, err = b.db.Exec(ctx, `INSERT INTO riverbus_gap (first_sequence, last_sequence, xid_bound) VALUES (31, 35, '1')`)
	require.NoError(t, err)
	require.Equal(t, int64(30), repair(), "below the open gap")
	_, err = b.db.Exec(ctx, `INSERT INTO riverbus_skipped (first_sequence, last_sequence, xid_bound) VALUES (10, 12, '1')`)
	require.NoError(t, err)
	require.Equal(t, int64(30), repair())
	_, err = b.db.Exec(ctx, `INSERT INTO riverbus_late (sequence) VALUES (33)`)
	require.NoError(t, err)
	require.Equal(t, int64(33), repair(), "never below a late event")
}

// plantEvents inserts events at the given sequence numbers, bypassing the
// assign trigger as only the owner can (on code before migration 017 an
// application login did the same with a temporary sequence of the
// sequence's name).
func plantEvents(t *testing.T, db *pgxpool.Pool, seqs ...int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `ALTER TABLE riverbus_event DISABLE TRIGGER riverbus_event_assign`); err != nil {
			return err
		}
		for _, s := range seqs {
			if _, err := tx.Exec(ctx, `INSERT INTO riverbus_event (global_sequence, transaction_id, type, data)
				VALUES ($1, pg_current_xact_id(), 't', '{"planted": true}')`, s); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_assign`)
		return err
	}))
}

// An event numbered above the sequence's last value did not get its number
// from the trigger. The horizon never passes it (passing it would make
// every number below it a "proven" gap, and the sequence hands those out
// next), reports it, and events below it keep flowing, rolled-back gaps
// among them.
func TestEventAboveSequenceIsHeldAndReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	logs := &logBuffer{}
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))})
	var seqs []int64
	for range 3 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}
	const near63 = int64(9223372036854775000)
	plantEvents(t, b.db, 1000, near63)
	for range 3 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}
	// A rolled-back writer below the planted events: its gap is proven as
	// usual.
	txA, _ := openWriter(t, b.db)
	require.NoError(t, txA.Rollback(ctx))
	seqs = append(seqs, appendEvent(t, b.db, "t"))
	top := seqs[len(seqs)-1]
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return horizon(t, b.db).Horizon == top
	}, "horizon at the last event from the sequence")
	for range 3 {
		res := pass(t, f)
		require.Equal(t, top, res.Horizon.Horizon, "the horizon passed an event above the sequence")
	}
	c, _ := jobs(t, b.db, "pp")
	want := map[int64]int{}
	for _, s := range seqs {
		want[s] = 1
	}
	require.Equal(t, want, c, "every event from the sequence once, no planted one")

	ps, err := hz.CheckAssumptions(ctx, b.db)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Equal(t, hz.ProblemEventAboveSequence, ps[0].Code)
	require.Contains(t, ps[0].Detail, "1000")
	require.Contains(t, ps[0].Detail, "9223372036854775000")
	require.Contains(t, ps[0].Fix, "riverbus repair sequence")
	h := horizon(t, b.db)
	require.Len(t, h.Problems, 1)
	require.Equal(t, hz.ProblemEventAboveSequence, h.Problems[0].Code)
	require.Contains(t, logs.String(), "problem=event_above_sequence")
}

// The repair of planted numbers: each event above the sequence gets the
// sequence's next number, so the pools receive it once, the sequence goes
// on from where it was (a number near 2^63 exhausts nothing), and appends
// keep working.
func TestRenumberRecoversPlantedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "pp"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	f := newFanout(t, b.db, fanout.Config{GapTimeout: time.Hour})
	var seqs []int64
	for range 3 {
		seqs = append(seqs, appendEvent(t, b.db, "t"))
	}
	const near63 = int64(9223372036854775000)
	plantEvents(t, b.db, 1000, near63)
	seqs = append(seqs, appendEvent(t, b.db, "t"))
	for range 3 {
		pass(t, f)
		require.Equal(t, seqs[3], horizon(t, b.db).Horizon, "the horizon passed a planted event")
	}

	// Refused while the sequence is below the horizon: its numbers would be
	// ones no pool reads.
	_, err := b.db.Exec(ctx, `SELECT setval('riverbus_event_global_sequence', 1)`)
	require.NoError(t, err)
	_, err = hz.Renumber(ctx, b.db)
	require.ErrorContains(t, err, "below the horizon")
	_, err = b.db.Exec(ctx, `SELECT setval('riverbus_event_global_sequence', $1)`, seqs[3])
	require.NoError(t, err)

	moved, err := hz.Renumber(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, []hz.Renumbered{{Old: 1000, New: seqs[3] + 1}, {Old: near63, New: seqs[3] + 2}}, moved)
	again, err := hz.Renumber(ctx, b.db)
	require.NoError(t, err)
	require.Empty(t, again)
	// They keep what they were; only the number changed.
	require.Equal(t, int64(2), count(t, b.db, `SELECT count(*) FROM riverbus_event WHERE data = '{"planted": true}' AND global_sequence = ANY($1)`,
		[]int64{seqs[3] + 1, seqs[3] + 2}))

	seqs = append(seqs, seqs[3]+1, seqs[3]+2)
	next := appendEvent(t, b.db, "t")
	require.Equal(t, seqs[3]+3, next, "the sequence goes on from where it was")
	seqs = append(seqs, next)
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return horizon(t, b.db).Horizon == next
	}, "horizon past the renumbered events")
	require.Empty(t, horizon(t, b.db).Problems)
	for _, pool := range []string{"pp", "keyed"} {
		c, _ := jobs(t, b.db, pool)
		want := map[int64]int{}
		for _, s := range seqs {
			want[s] = 1
		}
		require.Equal(t, want, c, pool)
	}
}
