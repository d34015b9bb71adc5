package workers_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/workers"
)

// clock is a settable clock for the policy.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testBundle struct {
	db     *pgxpool.Pool
	clock  *clock
	policy *workers.RetryPolicy
	rand   float64 // what the policy's RandFunc returns
}

// setup gives a fresh database and a policy on it with an injected clock
// and a RandFunc returning bundle.rand (0: no jitter drawn).
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{db: pgtest.NewPool(t), clock: &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}
	var err error
	b.policy, err = workers.NewRetryPolicy(b.db, &workers.RetryPolicyConfig{
		TimeNowFunc: b.clock.Now,
		RandFunc:    func() float64 { return b.rand },
		Logger:      slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return b
}

func createPool(t *testing.T, db *pgxpool.Pool, name string, s bustype.RetrySchedule) {
	t.Helper()
	_, _, err := pools.Create(context.Background(), db, bustype.PoolParams{Name: name, Retry: s})
	require.NoError(t, err)
}

// failedJob is a job of kind that has just failed its attempt-th attempt,
// with the errors of the attempts before it, as River hands it to
// NextRetry.
func failedJob(kind string, attempt int) *rivertype.JobRow {
	return &rivertype.JobRow{ID: 42, Kind: kind, Attempt: attempt, MaxAttempts: 25, Errors: make([]rivertype.AttemptError, attempt-1)}
}

// delays returns NextRetry − now for attempts 1..n.
func (b *testBundle) delays(kind string, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range n {
		out[i] = b.policy.NextRetry(failedJob(kind, i+1)).Sub(b.clock.Now())
	}
	return out
}

func TestScheduleIsThePools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createPool(t, b.db, "hooks", bustype.RetrySchedule{Base: 2 * time.Second, Factor: 3, MaxDelay: time.Minute, Jitter: -1})
	createPool(t, b.db, "fixed", bustype.RetrySchedule{Base: 5 * time.Second, Factor: 1, MaxDelay: 5 * time.Second, Jitter: -1})

	s := time.Second
	require.Equal(t, []time.Duration{2 * s, 6 * s, 18 * s, 54 * s, 60 * s, 60 * s, 60 * s}, b.delays("hooks", 7))
	require.Equal(t, []time.Duration{5 * s, 5 * s, 5 * s}, b.delays("fixed", 3))
	sched, ok := b.policy.Schedule("hooks")
	require.True(t, ok)
	require.Equal(t, bustype.RetrySchedule{Base: 2 * s, Factor: 3, MaxDelay: time.Minute, Jitter: 0}, sched)

	// A snooze does not count: River's rule, the number of errors.
	job := failedJob("hooks", 1)
	job.Errors = make([]rivertype.AttemptError, 2)
	require.Equal(t, 18*s, b.policy.NextRetry(job).Sub(b.clock.Now()))

	// Far past the cap, no overflow.
	require.Equal(t, time.Minute, b.policy.NextRetry(failedJob("hooks", 1000)).Sub(b.clock.Now()))
}

func TestDefaultSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A pool inserted without the retry columns, as every pool that
	// existed before migration 014 has them.
	_, err := b.db.Exec(context.Background(), `INSERT INTO riverbus_pool (name, queue, start_after, cursor_seq) VALUES ('old', 'old', 0, 0)`)
	require.NoError(t, err)
	createPool(t, b.db, "new", bustype.RetrySchedule{})

	s := time.Second
	want := []time.Duration{1 * s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 64 * s, 128 * s, 180 * s, 180 * s}
	require.Equal(t, want, b.delays("old", 10))
	require.Equal(t, want, b.delays("new", 10))
	p, err := pools.Get(context.Background(), b.db, "old")
	require.NoError(t, err)
	require.Equal(t, bustype.RetryScheduleDefault, p.Retry)

	// Jitter 0.1 shortens each delay by at most 10%.
	b.rand = 0.999999
	for i, d := range b.delays("new", 10) {
		require.LessOrEqual(t, d, want[i])
		require.GreaterOrEqual(t, d, want[i]-want[i]/10, "attempt %d", i+1)
		require.Less(t, d, want[i], "attempt %d: jitter applied", i+1)
	}
}

func TestJitterBoundsWithRealRandom(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	createPool(t, db, "hooks", bustype.RetrySchedule{Base: 10 * time.Second, MaxDelay: 10 * time.Second, Jitter: 0.5})
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	policy, err := workers.NewRetryPolicy(db, &workers.RetryPolicyConfig{TimeNowFunc: func() time.Time { return now }})
	require.NoError(t, err)
	seen := map[time.Duration]bool{}
	for range 200 {
		d := policy.NextRetry(failedJob("hooks", 3)).Sub(now)
		require.GreaterOrEqual(t, d, 5*time.Second)
		require.LessOrEqual(t, d, 10*time.Second)
		seen[d] = true
	}
	require.Greater(t, len(seen), 100, "jitter spreads the delays")
}

func TestPoolUpdateTakesEffectWithinTheRefreshInterval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createPool(t, b.db, "hooks", bustype.RetrySchedule{Base: time.Second, Jitter: -1})
	require.Equal(t, time.Second, b.delays("hooks", 1)[0])

	_, _, err := pools.Create(context.Background(), b.db, bustype.PoolParams{
		Name: "hooks", Update: true, Retry: bustype.RetrySchedule{Base: 7 * time.Second, Jitter: -1},
	})
	require.NoError(t, err)
	b.clock.Advance(workers.RetryRefreshIntervalDefault - time.Millisecond)
	require.Equal(t, time.Second, b.delays("hooks", 1)[0], "the copy read before is still young")
	b.clock.Advance(time.Millisecond)
	require.Equal(t, 7*time.Second, b.delays("hooks", 1)[0], "read again once RefreshInterval old")
}

func TestUnknownKindGetsRiversDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createPool(t, b.db, "hooks", bustype.RetrySchedule{Base: time.Hour, MaxDelay: time.Hour, Jitter: -1})

	// River's default: (errors+1)^4 seconds ± 10%, from the real clock.
	before := time.Now()
	at := b.policy.NextRetry(failedJob("not_a_pool", 4))
	after := time.Now()
	require.False(t, at.Before(before.Add(230*time.Second)), "at least 256s - 10%%")
	require.False(t, at.After(after.Add(282*time.Second)), "at most 256s + 10%%")

	// A pool created since the last read is found on its first failure.
	createPool(t, b.db, "later", bustype.RetrySchedule{Base: 3 * time.Second, Jitter: -1})
	b.clock.Advance(time.Second)
	require.Equal(t, 3*time.Second, b.delays("later", 1)[0])
}

// work runs job through the policy's middleware with a handler returning
// err, as River does before it asks NextRetry.
func work(t *testing.T, p *workers.RetryPolicy, job *rivertype.JobRow, err error) {
	t.Helper()
	mw, ok := p.Middleware().(rivertype.WorkerMiddleware)
	require.True(t, ok)
	got := mw.Work(context.Background(), job, func(context.Context) error { return err })
	require.Equal(t, err, got, "the error passes through untouched")
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createPool(t, b.db, "hooks", bustype.RetrySchedule{Base: time.Second, Factor: 2, MaxDelay: 3 * time.Minute, Jitter: -1})
	failed := errors.New("503")
	next := func(attempt int, err error) time.Duration {
		job := failedJob("hooks", attempt)
		work(t, b.policy, job, err)
		return b.policy.NextRetry(job).Sub(b.clock.Now())
	}

	require.Equal(t, 30*time.Second, next(1, workers.RetryAfter(failed, 30*time.Second)), "within the cap: honoured")
	require.Equal(t, 3*time.Minute, next(1, workers.RetryAfter(failed, time.Hour)), "beyond the cap: the cap")
	require.Equal(t, 16*time.Second, next(5, workers.RetryAfter(failed, 2*time.Second)), "shorter than the schedule: the schedule")
	require.Equal(t, time.Second, next(1, workers.RetryAfter(failed, -time.Minute)), "negative: the schedule")
	require.Equal(t, time.Second, next(1, failed), "no Retry-After: the schedule")
	require.Equal(t, 30*time.Second, next(1, fmtWrap(workers.RetryAfter(failed, 30*time.Second))), "found down the chain")

	// A hint is for its attempt only, and taken once.
	job := failedJob("hooks", 1)
	work(t, b.policy, job, workers.RetryAfter(failed, time.Minute))
	require.Equal(t, time.Minute, b.policy.NextRetry(job).Sub(b.clock.Now()))
	require.Equal(t, time.Second, b.policy.NextRetry(job).Sub(b.clock.Now()))
	work(t, b.policy, failedJob("hooks", 1), workers.RetryAfter(failed, time.Minute))
	require.Equal(t, 2*time.Second, b.policy.NextRetry(failedJob("hooks", 2)).Sub(b.clock.Now()), "a hint of another attempt is ignored")

	// On the last attempt there is no retry to schedule: nothing is noted
	// (River discards the job without asking NextRetry).
	last := failedJob("hooks", 1)
	last.MaxAttempts = 1
	work(t, b.policy, last, workers.RetryAfter(failed, time.Minute))
	last.MaxAttempts = 2 // as if an operator's retry gave it one more
	require.Equal(t, time.Second, b.policy.NextRetry(last).Sub(b.clock.Now()))
}

func fmtWrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "deliver: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// A read that fails (here: the columns are gone) keeps the schedules read
// before, and is tried again a second later, not on every failure.
func TestFailedReadKeepsTheSchedulesReadBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	createPool(t, b.db, "hooks", bustype.RetrySchedule{Base: 5 * time.Second, Jitter: -1})
	require.Equal(t, 5*time.Second, b.delays("hooks", 1)[0])

	_, err := b.db.Exec(ctx, `ALTER TABLE riverbus_pool RENAME COLUMN retry_base TO retry_base_gone`)
	require.NoError(t, err)
	b.clock.Advance(workers.RetryRefreshIntervalDefault)
	require.Equal(t, 5*time.Second, b.delays("hooks", 1)[0], "the read fails: the schedule read before")

	_, err = b.db.Exec(ctx, `ALTER TABLE riverbus_pool RENAME COLUMN retry_base_gone TO retry_base;
		UPDATE riverbus_pool SET retry_base = '7 seconds'`)
	require.NoError(t, err)
	b.clock.Advance(time.Second - time.Millisecond)
	require.Equal(t, 5*time.Second, b.delays("hooks", 1)[0], "not read again within a second of the failure")
	b.clock.Advance(time.Millisecond)
	require.Equal(t, 7*time.Second, b.delays("hooks", 1)[0])
}

func TestConfigRefreshInterval(t *testing.T) {
	t.Parallel()
	_, err := workers.NewRetryPolicy(nil, &workers.RetryPolicyConfig{RefreshInterval: -time.Second})
	require.EqualError(t, err, "RetryRefreshInterval must be positive, got -1s")
}
