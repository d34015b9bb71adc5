package retry

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
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/workers"
)

// Defaults and bounds of Config.
const (
	// RefreshIntervalDefault is how old the pools' schedules may get before
	// Policy reads them again: a pool update reaches the retries of every
	// worker process within it.
	RefreshIntervalDefault = 10 * time.Second

	// missRefreshAfter is how old the schedules must be before a job of a
	// kind Policy does not know makes it read them again (a pool created
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

// Config holds Policy's settings; zero fields get the defaults.
type Config struct {
	// RefreshInterval is how old the pools' schedules may get before they
	// are read again. Zero: RefreshIntervalDefault.
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

// Policy is a river.ClientRetryPolicy that schedules each pool job's next
// attempt by its pool's retry schedule. Safe for concurrent use.
type Policy struct {
	db       database.DB
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

// New returns a Policy that reads the pools' schedules from db. It returns
// an error naming the field of cfg that is not valid.
func New(db database.DB, cfg *Config) (*Policy, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	switch {
	case c.RefreshInterval == 0:
		c.RefreshInterval = RefreshIntervalDefault
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
	return &Policy{
		db: db, refresh: c.RefreshInterval, logger: c.Logger, now: c.TimeNowFunc, rand: c.RandFunc,
		fallback: &river.DefaultClientRetryPolicy{}, hints: map[int64]hint{},
	}, nil
}

// NextRetry returns when job, which just failed, is attempted again: after
// its pool's delay for its failure count (len(job.Errors)+1, as River
// counts, so snoozes do not count), or the Retry-After its handler asked
// for when that is longer, at most the pool's MaxDelay. A job whose kind is
// no pool gets River's default.
func (p *Policy) NextRetry(job *rivertype.JobRow) time.Time {
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
func (p *Policy) Schedule(pool string) (bustype.RetrySchedule, bool) {
	return p.schedule(pool, p.now())
}

func (p *Policy) schedule(kind string, now time.Time) (bustype.RetrySchedule, bool) {
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
func (p *Policy) load(now time.Time, maxAge time.Duration) *snapshot {
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

func readSchedules(ctx context.Context, db database.DB) (map[string]bustype.RetrySchedule, error) {
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

func (p *Policy) noteHint(job *rivertype.JobRow, delay time.Duration) {
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

func (p *Policy) takeHint(job *rivertype.JobRow) (time.Duration, bool) {
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
// handler's workers.RetryAfterError for NextRetry. Install it with the
// policy (riverclient.Config does).
func (p *Policy) Middleware() rivertype.Middleware { return &hintMiddleware{policy: p} }

type hintMiddleware struct {
	river.MiddlewareDefaults
	policy *Policy
}

func (m *hintMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	err := doInner(ctx)
	if delay, ok := workers.RetryAfterOf(err); ok && job.Attempt < job.MaxAttempts {
		m.policy.noteHint(job, delay)
	}
	return err
}
