package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/service"
	"github.com/riverbus/riverbus/migrations"
	"go.opentelemetry.io/otel/trace"
)

// Stats are this instance's counters since New.
type Stats struct {
	EventsFannedOut map[string]int64 // per pool, late events included
	LateDelivered   map[string]int64 // per pool
	// Undeliverable counts, per pool, the units (events or groups) that
	// could never become a job and became dead letters at once.
	Undeliverable  map[string]int64
	GapsProvenDead int64 // sequences
	GapsSkipped    int64 // sequences skipped by the gap timeout
	LateEvents     int64 // skipped sequences that committed after all
	Horizon        int64
}

// Fanout advances the horizon and turns events into River jobs, one per
// event per matching pool. Any number of instances may run against one
// database; they share the work through row and table locks.
//
// Its long-running parts are services (Services): the horizon, the pools'
// fan-out, the lane sweeper, the late-event retirer and the listener that
// wakes them. Run runs them all; riverbus.Client.Start runs each.
type Fanout struct {
	db     *pgxpool.Pool
	cfg    Config
	logger *slog.Logger

	mu    sync.Mutex
	stats Stats

	// plain is, per pool, what its last batch found out about the plain
	// path (plain.go). Guarded by mu.
	plain map[string]plainKind
	// noPlain: the plain path's statement cannot run on this server.
	// Guarded by mu.
	noPlain bool
	// heads is, per plain pool, its cursor after its last plain batch
	// that read up to the horizon (ride.go). Guarded by mu.
	heads map[string]int64
	// jobsAt is, per pool, when a batch of it last inserted jobs: the
	// pools that ride first (ride.go). Guarded by mu.
	jobsAt map[string]time.Time

	services Services
	trace    Trace
	// tracer makes the rounds' and batches' spans; nil without
	// Config.TracerProvider (telemetry.go).
	tracer trace.Tracer
	// gate stops the rounds and batches once the schema needs newer code
	// (every one checks it first): Config.Gate, or one of its own.
	gate *migrations.Gate
}

// Services are the fan-out's long-running parts. Each Run blocks until its
// ctx ends and returns nil; database errors are logged and retried.
type Services struct {
	// Listener wakes the horizon and the pools on riverbus_event and
	// riverbus_horizon notifications.
	Listener *Listener
	// Horizon advances the horizon.
	Horizon *HorizonService
	// Pools fans out every active pool.
	Pools *PoolService
	// Sweeper promotes ordered pools' due retries and releases stuck
	// lanes.
	Sweeper *lanes.Sweeper
	// Retirer retires late events every pool has handled.
	Retirer *Retirer
}

// All returns every service, to run each in a goroutine of its own.
func (s *Services) All() []service.Service {
	return []service.Service{s.Listener, s.Horizon, s.Pools, s.Sweeper, s.Retirer}
}

// New validates cfg and returns a Fanout. It does not touch the database.
func New(db *pgxpool.Pool, cfg *Config) (*Fanout, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Gate == nil {
		c.Gate = migrations.NewGate(0)
	}
	c.GapTimeout = cmp.Or(c.GapTimeout, GapTimeoutDefault)
	c.GapCheckInterval = cmp.Or(c.GapCheckInterval, GapCheckIntervalDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	if c.BatchSize == 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = BatchBytesDefault
	}
	if c.Workers == 0 {
		c.Workers = WorkersDefault
	}
	c.MarkInterval = cmp.Or(c.MarkInterval, MarkIntervalDefault)
	switch {
	case c.GapTimeout < 0:
		return nil, fmt.Errorf("GapTimeout must be positive, got %s", c.GapTimeout)
	case c.GapCheckInterval < 0:
		return nil, fmt.Errorf("GapCheckInterval must be positive, got %s", c.GapCheckInterval)
	case c.PollInterval < 0:
		return nil, fmt.Errorf("PollInterval must be positive, got %s", c.PollInterval)
	case c.BatchSize < 1 || c.BatchSize > 100_000:
		return nil, fmt.Errorf("BatchSize must be between 1 and 100000, got %d", c.BatchSize)
	case c.BatchBytes < 1:
		return nil, fmt.Errorf("BatchBytes must be positive, got %d", c.BatchBytes)
	case c.Workers < 1:
		return nil, fmt.Errorf("Workers must be at least 1, got %d", c.Workers)
	case c.MarkInterval < 0:
		return nil, fmt.Errorf("MarkInterval must be positive, got %s", c.MarkInterval)
	}
	if db == nil {
		return nil, errors.New("New: db is nil")
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.Default()
	}
	f := &Fanout{
		db: db, cfg: c, logger: logger.With("component", "fanout"),
		stats: Stats{EventsFannedOut: map[string]int64{}, LateDelivered: map[string]int64{}, Undeliverable: map[string]int64{}},
		plain: map[string]plainKind{}, heads: map[string]int64{}, jobsAt: map[string]time.Time{},
		tracer: newTracer(c.TracerProvider), gate: c.Gate,
	}
	s := &f.services
	s.Retirer = newRetirer(db, &retirerConfig{Logger: f.logger})
	s.Horizon = newHorizonService(db, &horizonServiceConfig{
		GapTimeout: c.GapTimeout, GapCheckInterval: c.GapCheckInterval, PollInterval: c.PollInterval,
		MarkInterval: c.MarkInterval, Logger: f.logger, Fanout: f, Gate: c.Gate,
	})
	s.Pools = newPoolService(f, poolServiceConfig{
		Workers: c.Workers, PollInterval: c.PollInterval, Logger: f.logger, OnLateFunc: s.Retirer.Wake,
	})
	s.Pools.analyzer = &jobAnalyzer{f: f, min: analyzeJobsMinDefault, logger: f.logger}
	s.Sweeper = lanes.NewSweeper(db, &lanes.SweeperConfig{Logger: f.logger})
	s.Listener = &Listener{f: f}
	return f, nil
}

// Services returns the fan-out's services.
func (f *Fanout) Services() *Services { return &f.services }

// Stats returns a copy of this instance's counters.
func (f *Fanout) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.EventsFannedOut = maps.Clone(f.stats.EventsFannedOut)
	s.LateDelivered = maps.Clone(f.stats.LateDelivered)
	s.Undeliverable = maps.Clone(f.stats.Undeliverable)
	return s
}

// usesPlainPath reports whether pool's next batch takes the plain path
// (plain.go), as far as its last batch found out.
func (f *Fanout) usesPlainPath(pool string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.plain[pool]
	return !f.noPlain && (k == plainAll || k == plainTyped)
}

// Wake asks for a horizon round and a batch of every pool due now, as a
// notification does.
func (f *Fanout) Wake() {
	f.services.Horizon.Wake()
	f.services.Pools.Wake()
}

// Run runs every service (Services) until ctx ends, then returns nil. A
// batch in flight when ctx ends is rolled back, never half applied. The
// horizon advances in a loop of its own, and each pool is fanned out on its
// own: database errors are logged and retried with a backoff of their own,
// the horizon's or one pool's, and never end Run nor delay another pool.
//
// Run also returns, after stopping every service, when the schema needs
// newer code than this build knows (Gate).
func (f *Fanout) Run(ctx context.Context) error {
	ctx, cancel := f.gate.Context(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range f.services.All() {
		wg.Go(func() { _ = s.Run(ctx) })
	}
	wg.Wait()
	return nil
}

// roundDone counts a round this instance ran and wakes what it concerns:
// the pools when the horizon moved, the retirer when late events may be
// left to retire.
func (f *Fanout) roundDone(r RoundResult) {
	now := time.Now()
	if f.trace.Round != nil {
		f.trace.Round(r, now)
	}
	f.roundTelemetry(r, now)
	f.mu.Lock()
	f.stats.Horizon = r.Horizon
	f.stats.GapsProvenDead += r.ProvenDead
	f.stats.GapsSkipped += r.Skipped
	f.stats.LateEvents += r.Late
	f.mu.Unlock()
	switch {
	case r.Late > 0:
		// A late event is read by the pools' batches, which the
		// notification of its append does not start.
		f.services.Pools.horizonMoved()
	case r.Moved:
		f.services.Pools.roundMoved()
	}
	f.services.Retirer.wakeAfter(r)
}

// Listener wakes the horizon on each riverbus_event notification (the
// round that moves the horizon wakes the pools), the pools on each
// riverbus_horizon notification (a horizon move by another instance), and
// both once after each (re)connection: LISTEN first, then the wake-up, so
// nothing that committed meanwhile waits for the poll interval.
type Listener struct{ f *Fanout }

// Run listens until ctx ends, reconnecting after a failure, then returns
// nil.
func (l *Listener) Run(ctx context.Context) error {
	listener := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return database.ServiceSession.Connect(ctx, l.f.db.Config().ConnConfig.Copy())
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				l.f.logger.Warn("listener: reconnecting", health.Operation(health.OpListen), "error", err)
			}
		},
		ReconnectDelay: time.Second,
	}
	listener.Handle("riverbus_event", l)
	listener.Handle("riverbus_horizon", l)
	_ = listener.Listen(ctx)
	return nil
}

// HandleNotification wakes the horizon on an append, and the pools when
// another instance moved the horizon (the loop of a round this instance
// ran wakes them itself). The pools are not woken by an append: a batch
// started before the round that passes the event would find nothing new,
// and the one the round then asks for would wait for it.
func (l *Listener) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	switch {
	case n.Channel == "riverbus_event":
		l.f.services.Horizon.Wake()
	case !l.f.services.Horizon.ownRound(n.PID):
		l.f.services.Pools.horizonMoved()
	}
	return nil
}

// HandleBacklog runs after LISTEN is in place: wake once, so nothing that
// committed before the listener (re)connected waits for the poll interval.
func (l *Listener) HandleBacklog(context.Context, string, *pgx.Conn) error {
	l.f.Wake()
	return nil
}

// PassResult says what one Pass did.
type PassResult struct {
	Horizon RoundResult
	Jobs    int  // jobs inserted over all pools
	More    bool // a round or a batch was full: call again at once
	Holding bool // the horizon waits at an open gap: look again soon
}

// Pass runs horizon rounds until the horizon stops moving, then one batch
// for every active pool that this instance can lock, then retires the late
// events every pool has handled: one step of what the services do, in the
// caller's goroutine, for tests and benchmarks that step the fan-out
// themselves.
func (f *Fanout) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	for range 10 {
		round, err := f.services.Horizon.Round(ctx)
		if err != nil {
			return res, err
		}
		res.Horizon = round
		if !round.More || !round.Moved {
			break
		}
	}
	if !res.Horizon.Locked {
		// Another instance holds the horizon; it may be waiting at a gap.
		res.Holding = true
	}
	res.Holding = res.Holding || res.Horizon.Holding

	names, err := f.activePools(ctx)
	if err != nil {
		return res, err
	}
	// Instances start at different pools so they spread out.
	if len(names) > 1 {
		k := rand.IntN(len(names))
		names = append(names[k:], names[:k]...)
	}

	var (
		mu       sync.Mutex
		firstErr error
		late     int // late events the pools delivered in this pass
		wg       sync.WaitGroup
		sem      = make(chan struct{}, f.cfg.Workers)
	)
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b, full, err := f.fanOutPool(ctx, name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			res.Jobs += b.Jobs
			late += b.Late
			res.More = res.More || full
		}()
	}
	wg.Wait()
	if firstErr == nil && (res.Horizon.Late > 0 || res.Horizon.LatePending > 0 || late > 0) {
		// Pools may now have handled every late event: retire those, once
		// per pass, after the pools. While any late record is left, every
		// pass that runs the round tries again: a pool that lagged behind
		// handles the event on its normal path, which counts as no late
		// delivery, so nothing else would trigger the retirement.
		_, firstErr = retireLateEvents(ctx, f.db)
	}
	res.More = res.More || (res.Horizon.More && res.Horizon.Moved)
	return res, firstErr
}
