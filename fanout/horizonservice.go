package fanout

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/service"
	"github.com/riverbus/riverbus/migrations"
)

// pageSizeDefault is the default of horizonServiceConfig.PageSize.
const pageSizeDefault = 10_000

// horizonServiceConfig is the horizon service's configuration. Zero durations are
// errors for the caller to catch; the fan-out fills them from its own
// configuration.
type horizonServiceConfig struct {
	// GapTimeout is how long a gap may stay open before it is skipped.
	GapTimeout time.Duration
	// GapCheckInterval is how soon a round runs again while the horizon
	// waits at a gap (this instance's or another's).
	GapCheckInterval time.Duration
	// PollInterval is how soon a round runs again when nothing woke it.
	PollInterval time.Duration
	// PageSize is how many visible sequences one round reads (0:
	// pageSizeDefault).
	PageSize int
	// MarkInterval and MarkCap are the rounds' (roundParams); a zero
	// MarkInterval marks with every round that moves the horizon.
	MarkInterval time.Duration
	MarkCap      int64
	// Logger receives the rounds' warnings and the broken assumptions.
	Logger *slog.Logger
	// Gate stops the service when the schema needs newer code than it
	// knows (its rounds refuse then); nil means a gate of its own, for
	// this build's schema.
	Gate *migrations.Gate
	// Fanout is the fan-out this instance's rounds serve: the batches of
	// its pools ride on them (roundParams.Rides), and it hears of every
	// round this instance ran (Locked), from the goroutine that ran it, to
	// count it and wake the pools and the late-event retirer
	// (Fanout.roundDone). Nil: a service on its own (tests).
	Fanout *Fanout
}

// HorizonService runs horizon rounds in a loop (Run), and single rounds for the
// fan-out's Pass (Round). Any number of instances may run against one
// database; one round at a time runs, the others skip theirs.
type HorizonService struct {
	db  *pgxpool.Pool
	cfg horizonServiceConfig

	wake chan struct{}
	// ownPIDs are the backends that ran this instance's rounds or sent
	// their notifications: their riverbus_horizon notifications need not
	// wake it.
	ownPIDs    sync.Map
	problemLog problemLog
	clock      atomic.Pointer[Clock]

	// The horizon this instance's last round left, and how far the last
	// round that moved it moved it: the pools a fast round lets ride
	// (roundParams.Head).
	head, step atomic.Int64
	headKnown  atomic.Bool
	holding    atomic.Bool // the last round waited at a gap

	// fenced: a fence ran since this instance's last failed round. Every
	// failover shows as failed rounds (the connections to the old primary
	// break, and the guard refuses rounds until a fence has run), so the
	// first round and the first after a failure fence first.
	fenced atomic.Bool

	// The riverbus_horizon notifications (announce): while Run runs, its
	// announcer sends them, the latest horizon each time it is woken.
	announceWake    chan struct{}
	announceHorizon atomic.Int64
	announcing      atomic.Bool

	// Since when this instance's rounds have found the round's lock taken
	// (zero: the last round got it), and who held it when last looked.
	lockMissed lockMissed

	// TestSignals lets tests wait for what Run did.
	TestSignals HorizonTestSignals
}

// lockMissed follows a run of rounds that found the round's lock taken.
type lockMissed struct {
	after    time.Duration // lockHeldAfter; tests shorten it
	mu       sync.Mutex
	since    time.Time
	lookedAt time.Time
	holders  []database.LockHolder
}

// lockHeldAfter is how long rounds may find the round's lock taken before
// the service looks up who holds it and says so. A round holds it for
// milliseconds, so another instance's rounds never keep it that long.
const lockHeldAfter = 30 * time.Second

// lockHeld says since when this instance's rounds have found the round's
// lock held by another session (zero time: its last round got it), and,
// once that has lasted lockHeldAfter, who held it when last looked.
func (s *HorizonService) lockHeld() (since time.Time, holders []database.LockHolder) {
	s.lockMissed.mu.Lock()
	defer s.lockMissed.mu.Unlock()
	return s.lockMissed.since, slices.Clone(s.lockMissed.holders)
}

// noteLock records whether a round got the round's lock and, when rounds
// have missed it for lockHeldAfter, looks up and logs who holds it (once
// per lockHeldAfter): with the lock in riverbus's private schema only a
// riverbus_worker login or the owner can hold it, by a statement parsed
// on it in a transaction left open, or a round that does not end.
func (s *HorizonService) noteLock(ctx context.Context, locked bool) {
	m := &s.lockMissed
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	switch {
	case locked:
		m.since, m.lookedAt, m.holders = time.Time{}, time.Time{}, nil
		return
	case m.since.IsZero():
		m.since = now
		return
	case now.Sub(m.since) < cmp.Or(m.after, lockHeldAfter) || now.Sub(m.lookedAt) < cmp.Or(m.after, lockHeldAfter):
		return
	}
	m.lookedAt = now
	holders, err := lockHolders(ctx, s.db)
	if err != nil {
		s.cfg.Logger.Warn("horizon: rounds keep finding the round's lock taken; looking up who holds it failed",
			"for", now.Sub(m.since).Round(time.Second), "error", err)
		return
	}
	m.holders = holders
	held := make([]string, len(holders))
	for i, h := range holders {
		held[i] = h.String()
	}
	s.cfg.Logger.Warn("horizon: rounds keep finding the round's lock taken, so this instance skips them; end the session that holds it if it is not another instance's round",
		"for", now.Sub(m.since).Round(time.Second), "held_by", strings.Join(held, ", "))
}

// HorizonTestSignals are the horizon service's test signals, for tests
// (of this package and others, through Fanout.Services) that wait for a round.
type HorizonTestSignals struct {
	// RoundDone receives the result of every round Run completes.
	RoundDone service.TestSignal[RoundResult]
}

// Init makes every signal record values; tests only, before Run.
func (ts *HorizonTestSignals) Init(tb service.TB) { ts.RoundDone.Init(tb) }

// newHorizonService returns a horizon service over db.
func newHorizonService(db *pgxpool.Pool, cfg *horizonServiceConfig) *HorizonService {
	c := *cfg
	c.PageSize = cmp.Or(c.PageSize, pageSizeDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Gate == nil {
		c.Gate = migrations.NewGate(0)
	}
	return &HorizonService{db: db, cfg: c, wake: service.NewWake(), announceWake: service.NewWake()}
}

// Wake asks Run for a round now.
func (s *HorizonService) Wake() { service.Wake(s.wake) }

// ownRound reports whether the backend with pid ran one of this instance's
// rounds or sent their riverbus_horizon notifications.
func (s *HorizonService) ownRound(pid uint32) bool {
	_, own := s.ownPIDs.Load(pid)
	return own
}

// UseClock makes the rounds measure gap ages by c, from now on (nil: the
// database's clock alone). Tests only.
func (s *HorizonService) UseClock(c *Clock) { s.clock.Store(c) }

// Round runs one round, logs what it found and reports it to the fan-out.
// The first round, and the first after a failed one, first runs the
// failover fence (Fence).
func (s *HorizonService) Round(ctx context.Context) (RoundResult, error) {
	if !s.fenced.Load() {
		f, err := horizon.Fence(ctx, s.db)
		if err != nil {
			return RoundResult{}, err
		}
		s.fenced.Store(true)
		if f != nil {
			s.cfg.Logger.Warn("failover: the database is on a new WAL timeline; fenced the old one so that no number it delivered is used again",
				"old_timeline", f.OldTimeline, "new_timeline", f.NewTimeline,
				"horizon_before", f.HorizonBefore, "horizon_after", f.HorizonAfter, "skipped", f.Skipped(),
				"events_renumbered", f.EventsRenumbered, "job_id_after", f.JobIDAfter, "jobs_rescued", f.JobsRescued)
			s.headKnown.Store(false)
		}
	}
	res, err := advance(ctx, s.db, roundParams{
		GapTimeout: s.cfg.GapTimeout, PageSize: s.cfg.PageSize, AgeShift: s.clock.Load().Shift(),
		Rides: s.cfg.Fanout, Fast: true, Code: s.cfg.Gate.Code(),
		MarkInterval: s.cfg.MarkInterval, MarkCap: s.cfg.MarkCap,
		Head: s.head.Load(), Step: s.step.Load(),
		// While the horizon waits at a gap most rounds move nothing, and
		// batches riding on them would find nothing: none ride then.
		HeadKnown: s.headKnown.Load() && !s.holding.Load(),
	})
	if err != nil {
		s.fenced.Store(false)
		return res, err
	}
	if res.Locked {
		if prev := s.head.Swap(res.Horizon); res.Moved {
			s.step.Store(res.Horizon - prev)
		}
		s.headKnown.Store(true)
		s.holding.Store(res.Holding || res.Blocked)
	}
	if res.pid != 0 {
		s.ownPIDs.Store(res.pid, struct{}{})
	}
	s.noteLock(ctx, res.Locked)
	if !res.Locked {
		return res, nil
	}
	s.problemLog.log(s.cfg.Logger, res.Problems)
	if res.Skipped > 0 {
		s.cfg.Logger.Warn("gap timeout: horizon skipped missing sequences; they are watched and will be delivered late if they commit",
			"count", res.Skipped, "horizon", res.Horizon, "gap_timeout", s.cfg.GapTimeout)
	}
	if res.Late > 0 {
		s.cfg.Logger.Warn("late events: skipped sequences committed after their gap timed out; delivering them to pools that passed them",
			"count", res.Late)
	}
	if res.ProvenDead > 0 {
		s.cfg.Logger.Debug("gap proven rolled back", "sequences", res.ProvenDead, "horizon", res.Horizon)
	}
	if s.cfg.Fanout != nil {
		s.cfg.Fanout.roundDone(res)
	}
	if res.announce {
		s.announce(ctx, res.Horizon)
	}
	return res, nil
}

// announce sends the riverbus_horizon notification that the horizon moved
// to h (or late events were found), after the round committed: from Run's
// announcer while Run runs, so that the next round need not wait for it,
// else at once. A notifying transaction waits at commit for every other
// notifying transaction (appends among them) to flush its WAL, so the
// notification stays out of the round's transaction. It only wakes other
// instances, which also poll: a failure is logged, not retried.
func (s *HorizonService) announce(ctx context.Context, h int64) {
	for {
		old := s.announceHorizon.Load()
		if h <= old || s.announceHorizon.CompareAndSwap(old, h) {
			break
		}
	}
	if s.announcing.Load() {
		service.Wake(s.announceWake)
		return
	}
	s.sendAnnouncement(ctx, h)
}

func (s *HorizonService) sendAnnouncement(ctx context.Context, h int64) {
	err := func() error {
		c, err := s.db.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		s.ownPIDs.Store(c.Conn().PgConn().PID(), struct{}{})
		_, err = c.Exec(ctx, sqlHorizonNotify, strconv.FormatInt(h, 10))
		return err
	}()
	if err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("horizon notification failed; other instances learn of the move at their next round or poll",
			health.Operation(health.OpHorizonNotify), "error", err)
	}
}

// runAnnouncer sends the latest horizon each time it is woken, until ctx
// ends.
func (s *HorizonService) runAnnouncer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.announceWake:
		}
		s.sendAnnouncement(ctx, s.announceHorizon.Load())
	}
}

// Run advances the horizon until ctx ends, then returns nil: at once again
// while a round moves a full page, soon (GapCheckInterval) while it waits
// at a gap, else when woken or at the poll interval. Its errors are logged
// and retried with a backoff of its own.
func (s *HorizonService) Run(ctx context.Context) error {
	announcerDone := make(chan struct{})
	go func() {
		defer close(announcerDone)
		s.runAnnouncer(ctx)
	}()
	s.announcing.Store(true)
	defer func() {
		s.announcing.Store(false)
		<-announcerDone
	}()
	backoff := time.Duration(0)
	for {
		round, err := s.Round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			s.TestSignals.RoundDone.Signal(round)
		}
		var wait time.Duration
		switch {
		case s.cfg.Gate.Stop(err):
			s.cfg.Logger.Error("horizon stopped: the schema needs newer code", "error", err)
			return nil
		case err != nil:
			backoff = service.NextBackoff(backoff)
			wait = service.Jitter(backoff)
			s.cfg.Logger.Error("horizon round failed; retrying", health.Operation(health.OpHorizonRound), "error", err, "retry_in", wait.Round(time.Millisecond))
		case round.More && round.Moved:
			backoff = 0
			continue
		case !round.Locked || round.Holding:
			// Another instance holds the horizon (it may wait at a gap),
			// or this one waits at a gap.
			backoff = 0
			wait = s.cfg.GapCheckInterval
		default:
			backoff = 0
			wait = s.cfg.PollInterval
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-s.wake:
			timer.Stop()
			if err != nil {
				// Still wait out the backoff, but no longer than needed.
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		case <-timer.C:
		}
	}
}

// Retirer retires late events that every pool has handled
// (retireLateEvents) whenever it is woken: by a round that found late
// events or saw some pending, and by a batch that delivered late events.
// While a late record is left every round wakes it again: a pool that
// lagged behind handles the event on its normal path, which signals no
// late delivery.
type Retirer struct {
	db     *pgxpool.Pool
	logger *slog.Logger
	wake   chan struct{}

	// TestSignals lets tests wait for what Run did.
	TestSignals RetirerTestSignals
}

// retirerConfig is the late-event retirer's configuration.
type retirerConfig struct {
	// Logger receives its failures.
	Logger *slog.Logger
}

// RetirerTestSignals are the late-event retirer's test signals, for tests
// (of this package and others, through Fanout.Services).
type RetirerTestSignals struct {
	// Retired receives how many late events each retirement retired.
	Retired service.TestSignal[int64]
}

// Init makes every signal record values; tests only, before Run.
func (ts *RetirerTestSignals) Init(tb service.TB) { ts.Retired.Init(tb) }

// newRetirer returns a late-event retirer over db.
func newRetirer(db *pgxpool.Pool, cfg *retirerConfig) *Retirer {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Retirer{db: db, logger: logger, wake: service.NewWake()}
}

// Wake asks Run for a retirement.
func (r *Retirer) Wake() { service.Wake(r.wake) }

// wakeAfter wakes the retirer when round found late events or saw some
// not yet retired.
func (r *Retirer) wakeAfter(round RoundResult) {
	if round.Late > 0 || round.LatePending > 0 {
		r.Wake()
	}
}

// Run retires late events each time it is woken, until ctx ends; then it
// returns nil. A failure is logged and retried with a backoff of its own.
func (r *Retirer) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		}
		for {
			n, err := retireLateEvents(ctx, r.db)
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				backoff = 0
				r.TestSignals.Retired.Signal(n)
				break
			}
			backoff = service.NextBackoff(backoff)
			wait := service.Jitter(backoff)
			r.logger.Error("retiring late events failed; retrying", health.Operation(health.OpRetireLate), "error", err, "retry_in", wait.Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}
}

// Clock moves the database's clock forward for gap ages, for tests that
// must pass a gap timeout without waiting for it (HorizonService.UseClock). The
// database keeps measuring: an Advance of d makes every gap d older, and a
// gap first seen after it starts at age zero. A nil *Clock is the
// database's clock alone.
type Clock struct{ shift atomic.Int64 }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.shift.Add(int64(d)) }

// Shift is how far the clock was moved; 0 for a nil Clock.
func (c *Clock) Shift() time.Duration {
	if c == nil {
		return 0
	}
	return time.Duration(c.shift.Load())
}

// lockHolders returns the sessions that hold the round's lock.
func lockHolders(ctx context.Context, db database.DB) ([]database.LockHolder, error) {
	rows, err := db.Query(ctx, sqlHorizonLockHolders)
	if err != nil {
		return nil, err
	}
	return database.CollectLockHolders(rows)
}

// problemLog logs the broken assumptions a round saw at ERROR: at once when
// the set of problems changes, then again every problemLogInterval while it
// lasts, and once at INFO when they are gone.
type problemLog struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

const problemLogInterval = time.Minute

func (l *problemLog) log(logger *slog.Logger, ps []horizon.Problem) {
	codes := make([]string, len(ps))
	for i, p := range ps {
		codes[i] = p.Code
	}
	key := strings.Join(codes, ",")
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == l.last && (key == "" || time.Since(l.at) < problemLogInterval) {
		return
	}
	if key == "" {
		logger.Info("the gap proof's assumptions hold again; the horizon proves and skips gaps again", "was", l.last)
	}
	l.last, l.at = key, time.Now()
	for _, p := range ps {
		msg := "horizon: an assumption of the gap proof is broken"
		if p.Blocks {
			msg += "; the horizon proves and skips no gap until it is fixed"
		}
		logger.Error(msg, "problem", p.Code, "detail", p.Detail, "what", p.Message, "fix", p.Fix)
	}
}
