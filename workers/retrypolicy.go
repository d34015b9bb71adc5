package workers

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/health"
)

// Bounds of retryPolicy; its refresh interval's default is
// RetryRefreshIntervalDefault, beside Config.RetryRefreshInterval.
const (
	// missRefreshAfter is how old the schedules must be before a job of a
	// kind retryPolicy does not know makes it read them again (a pool created
	// since), so a stream of non-pool jobs costs at most a query a second.
	missRefreshAfter = time.Second

	// loadTimeout bounds one read of the schedules; a failed read keeps
	// the schedules read before and is tried again after missRefreshAfter.
	loadTimeout = 5 * time.Second

	// hintsPruneAt is how many noted Retry-After delays trigger dropping
	// those no NextRetry took (a worker's own NextRetry won, or an error
	// handler cancelled the job).
	hintsPruneAt = 1024
	hintMaxAge   = time.Minute
)

// retryPolicyConfig holds retryPolicy's settings; zero fields get the defaults.
type retryPolicyConfig struct {
	// RefreshInterval is how old the pools' schedules may get before they
	// are read again. Zero: RetryRefreshIntervalDefault.
	RefreshInterval time.Duration
	// Logger receives a warning when the schedules cannot be read. Nil:
	// slog.Default().
	Logger *slog.Logger
	// TimeNowFunc is the clock. Nil: time.Now. Tests inject theirs.
	TimeNowFunc func() time.Time
	// RandFunc returns the random fraction in [0, 1) that scales a delay's
	// jitter. Nil: math/rand/v2's Float64.
	RandFunc func() float64
}

// retryPolicy is the River retry policy of pool jobs: a failed job of a
// pool is attempted again on the pool's retry schedule
// (bustype.RetrySchedule, stored with the pool since migration 014), for Go
// handlers and webhook workers alike. It is River's own hook,
// river.Config.RetryPolicy, which RiverConfig installs with the
// middleware that passes a handler's RetryAfterError on to it.
//
// A job's kind is its pool's name. retryPolicy keeps the schedules of every pool
// in memory and reads them again when they are older than the refresh
// interval, so a `pool update` reaches every worker process within it. A
// kind that is no pool (a job of the application's own inserted into a
// pool's queue) gets River's default policy, attempt⁴ seconds. A worker's
// own NextRetry, when it returns a time, still wins: River asks the client's
// policy only when the worker has none.
//
// A handler that returns a RetryAfterError (a webhook answered with
// a Retry-After header does) has its next attempt wait the longer of that
// delay and the schedule's, never beyond the pool's MaxDelay. River hands
// the policy only the job's row, as it was fetched: the attempt's error is
// not in it yet. So the middleware notes the delay, by job id and attempt,
// when the handler returns, and NextRetry, which River calls right after in
// the same goroutine, takes it.
//
// It is a river.ClientRetryPolicy that schedules each pool job's next
// attempt by its pool's retry schedule. Safe for concurrent use.
type retryPolicy struct {
	db       DB
	refresh  time.Duration
	logger   *slog.Logger
	now      func() time.Time
	rand     func() float64
	fallback river.ClientRetryPolicy

	snap   atomic.Pointer[snapshot]
	loadMu sync.Mutex

	hintMu sync.Mutex
	hints  map[int64]hint
}

type snapshot struct {
	loadedAt  time.Time
	schedules map[string]bustype.RetrySchedule
	// failed: the read at loadedAt failed and schedules are the ones read
	// before it; try again after missRefreshAfter, not every call.
	failed bool
}

// maxAge is how old s may get before the schedules are read again.
func (s *snapshot) maxAge(refresh time.Duration) time.Duration {
	if s.failed {
		return missRefreshAfter
	}
	return refresh
}

// hint is a Retry-After delay a handler asked for in attempt attempt.
type hint struct {
	attempt int
	delay   time.Duration
	at      time.Time
}

// newRetryPolicy returns a retryPolicy that reads the pools' schedules from db. It returns
// an error naming the field of cfg that is not valid.
func newRetryPolicy(db DB, cfg *retryPolicyConfig) (*retryPolicy, error) {
	var c retryPolicyConfig
	if cfg != nil {
		c = *cfg
	}
	switch {
	case c.RefreshInterval == 0:
		c.RefreshInterval = RetryRefreshIntervalDefault
	case c.RefreshInterval < 0:
		return nil, fmt.Errorf("RetryRefreshInterval must be positive, got %s", c.RefreshInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TimeNowFunc == nil {
		c.TimeNowFunc = time.Now
	}
	if c.RandFunc == nil {
		c.RandFunc = rand.Float64
	}
	return &retryPolicy{
		db: db, refresh: c.RefreshInterval, logger: c.Logger, now: c.TimeNowFunc, rand: c.RandFunc,
		fallback: &river.DefaultClientRetryPolicy{}, hints: map[int64]hint{},
	}, nil
}

// NextRetry returns when job, which just failed, is attempted again: after
// its pool's delay for its failure count (len(job.Errors)+1, as River
// counts, so snoozes do not count), or the Retry-After its handler asked
// for when that is longer, at most the pool's MaxDelay. A job whose kind is
// no pool gets River's default.
func (p *retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	now := p.now()
	after, hinted := p.takeHint(job)
	s, ok := p.schedule(job.Kind, now)
	if !ok {
		return p.fallback.NextRetry(job)
	}
	delay := s.Jittered(s.Delay(len(job.Errors)+1), p.rand())
	if hinted {
		delay = min(max(delay, after), s.MaxDelay)
	}
	return now.Add(delay)
}

// Schedule returns the schedule in force for pool, as NextRetry sees it,
// and false when pool is not known.
func (p *retryPolicy) Schedule(pool string) (bustype.RetrySchedule, bool) {
	return p.schedule(pool, p.now())
}

func (p *retryPolicy) schedule(kind string, now time.Time) (bustype.RetrySchedule, bool) {
	snap := p.snap.Load()
	if snap == nil {
		snap = p.load(now, p.refresh)
	} else if maxAge := snap.maxAge(p.refresh); now.Sub(snap.loadedAt) >= maxAge {
		snap = p.load(now, maxAge)
	}
	s, ok := snap.schedules[kind]
	if !ok && now.Sub(snap.loadedAt) >= missRefreshAfter {
		snap = p.load(now, missRefreshAfter)
		s, ok = snap.schedules[kind]
	}
	return s, ok
}

// load reads the schedules unless another caller did while this one waited
// (the snapshot is then younger than maxAge), and returns the snapshot.
func (p *retryPolicy) load(now time.Time, maxAge time.Duration) *snapshot {
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	old := p.snap.Load()
	if old != nil && now.Sub(old.loadedAt) < maxAge {
		return old
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	schedules, err := readSchedules(ctx, p.db)
	if err != nil {
		p.logger.Warn("riverbus: read the pools' retry schedules; keeping those read before (River's default for unknown pools)",
			health.Operation(health.OpRetrySchedules), "error", err)
		next := &snapshot{loadedAt: now, schedules: map[string]bustype.RetrySchedule{}, failed: true}
		if old != nil {
			next.schedules = old.schedules
		}
		p.snap.Store(next)
		return next
	}
	next := &snapshot{loadedAt: now, schedules: schedules}
	p.snap.Store(next)
	return next
}

const sqlSchedules = `SELECT name, retry_base, retry_factor, retry_max_delay, retry_jitter FROM riverbus_pool`

func readSchedules(ctx context.Context, db DB) (map[string]bustype.RetrySchedule, error) {
	rows, err := db.Query(ctx, sqlSchedules)
	if err != nil {
		return nil, err
	}
	out := map[string]bustype.RetrySchedule{}
	var (
		name string
		s    bustype.RetrySchedule
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &s.Base, &s.Factor, &s.MaxDelay, &s.Jitter}, func() error {
		out[name] = s
		return nil
	})
	return out, err
}

func (p *retryPolicy) noteHint(job *rivertype.JobRow, delay time.Duration) {
	now := p.now()
	p.hintMu.Lock()
	defer p.hintMu.Unlock()
	if len(p.hints) >= hintsPruneAt {
		for id, h := range p.hints {
			if now.Sub(h.at) > hintMaxAge {
				delete(p.hints, id)
			}
		}
	}
	p.hints[job.ID] = hint{attempt: job.Attempt, delay: delay, at: now}
}

func (p *retryPolicy) takeHint(job *rivertype.JobRow) (time.Duration, bool) {
	p.hintMu.Lock()
	defer p.hintMu.Unlock()
	h, ok := p.hints[job.ID]
	if !ok {
		return 0, false
	}
	delete(p.hints, job.ID)
	return h.delay, h.attempt == job.Attempt
}

// Middleware returns the River worker middleware that notes the delay of a
// handler's RetryAfterError for NextRetry. Install it with the
// policy (RiverConfig does).
func (p *retryPolicy) Middleware() rivertype.Middleware { return &hintMiddleware{policy: p} }

type hintMiddleware struct {
	river.MiddlewareDefaults
	policy *retryPolicy
}

func (m *hintMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	err := doInner(ctx)
	if delay, ok := RetryAfterOf(err); ok && job.Attempt < job.MaxAttempts {
		m.policy.noteHint(job, delay)
	}
	return err
}
