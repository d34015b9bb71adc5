package riverbus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/pooler"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/retention"
	"github.com/riverbus/riverbus/internal/service"
	"github.com/riverbus/riverbus/internal/upgrade"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/workers"
)

// ErrNotMigrated is returned by Start when the database lacks the riverbus
// schema, or has an older version of it than this build needs.
var ErrNotMigrated = errors.New("riverbus: the database is not migrated")

// Client runs riverbus in a process (Start, Stop) and is the operator API
// over its database. It is safe for concurrent use.
type Client struct {
	db     *pgxpool.Pool
	cfg    Config
	logger *slog.Logger

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	river   *river.Client[pgx.Tx]
	stopped chan struct{}

	// The fan-out's services and the checkpoint advancer; nil with
	// FanoutDisabled. Made by NewClient, run by each Start.
	fanout   *fanout.Fanout
	advancer *checkpoint.Advancer
	// The retention service; nil with FanoutDisabled or
	// Retention.Interval -1.
	retainer *retention.Service
	// gate stops every part of the Client when the schema needs newer
	// code: the fan-out's rounds and batches and retention's find out in
	// their transactions, watcher for the workers.
	gate    *migrations.Gate
	watcher *upgrade.Watcher
	// haltCancel ends the stop the gate began (halt), so that Stop's own
	// deadline applies. Guarded by haltMu, not mu, which that stop holds.
	haltMu     sync.Mutex
	haltCancel context.CancelFunc

	// failures counts what this Client's services and River fail at; every
	// logger the Client hands out records into it (health.NewHandler).
	failures *health.Recorder
	// reporter writes the process report while the Client runs; nil
	// before Start, or with ReportInterval -1.
	reporter *health.Reporter
}

// NewClient validates cfg and returns a Client over db. It does not touch
// the database: operator methods work at once, Start begins the work.
func NewClient(db *pgxpool.Pool, cfg *Config) (*Client, error) {
	if db == nil {
		return nil, errors.New("riverbus: NewClient: db is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("riverbus: %w", err)
	}
	// Every failure a part logs is also counted for the process report:
	// riverbus's services mark theirs (health.Operation), River's are
	// known by their service's name.
	failures := health.NewRecorder()
	c.Logger = slog.New(health.NewHandler(c.Logger.Handler(), failures, false))
	c.Fanout.Logger = slog.New(health.NewHandler(c.Fanout.Logger.Handler(), failures, false))
	c.Work.Logger = slog.New(health.NewHandler(cmp.Or(c.Work.Logger, slog.Default()).Handler(), failures, true))
	// Build the parts now, so a bad field is reported before Start.
	client := &Client{db: db, cfg: c, logger: c.Logger, failures: failures, gate: migrations.NewGate(c.schemaCode)}
	client.watcher = &upgrade.Watcher{DB: db, Gate: client.gate, Logger: c.Logger}
	if !c.FanoutDisabled {
		// The fan-out shares the client's gate: its rounds and batches
		// stop with the client's other parts when the schema needs newer
		// code.
		fc := c.Fanout
		fc.Gate = client.gate
		if client.fanout, err = fanout.New(db, &fc); err != nil {
			return nil, fmt.Errorf("riverbus: Fanout: %w", err)
		}
		client.advancer, err = checkpoint.NewAdvancer(db, &checkpoint.AdvancerConfig{
			Interval: c.CheckpointInterval, Logger: c.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("riverbus: %w", err)
		}
		if c.Retention.Interval != -1 {
			client.retainer, err = retention.NewService(db, &retention.ServiceConfig{
				Interval: c.Retention.Interval, BatchSize: c.Retention.BatchSize, Logger: c.Logger, Gate: client.gate,
			})
			if err != nil {
				return nil, fmt.Errorf("riverbus: %w", err)
			}
		}
	}
	if _, err := workers.RiverConfig(workers.RiverOpts{Config: c.Work}); err != nil {
		return nil, fmt.Errorf("riverbus: Work: %w", err)
	}
	client.stopped = make(chan struct{})
	close(client.stopped)
	return client, nil
}

// Start checks the database and the workers' pools, then runs the fan-out
// services and the workers in the background until Stop. It returns an
// error, and runs nothing, when the database is not migrated
// (ErrNotMigrated), when its schema needs newer code (*migrations.SchemaTooNewError:
// a newer build migrated it), when the pool's sessions are limited below
// what riverbus needs (a *bustype.SessionLimitError: see ConfigurePool), when a pool
// with a worker does not exist, or when a River queue the workers would
// fetch from holds a pool without a worker (its jobs would fail as unknown
// kinds). A database outage after Start is logged and retried, never
// returned. The fan-out and the workers need a PostgreSQL session of their
// own: through a connection pooler in transaction mode (PgBouncer's
// pool_mode = transaction) Start returns an error matching
// ErrTransactionPooler; give such a Client a direct or session-mode pool.
//
// When a migration that needs newer code is applied while it runs, the
// Client stops on its own: the fan-out's rounds and batches and retention
// refuse from that migration's commit on, the workers stop fetching within
// about a second (their running jobs finish), Stopped's channel closes and
// Err says which versions.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("riverbus: client already started")
	}
	// A transaction pooler first: through one, the checks below would read
	// another client's session.
	if err := c.checkSession(ctx); err != nil {
		return err
	}
	// River's statements run on the pool's sessions as they are: a limit
	// below what they need starves them (every completion cut short, the
	// completer giving up), so say so now rather than deliver nothing;
	// before the schema check, whose statements may be cut too.
	if err := database.ServiceSession.Check(ctx, c.db); err != nil {
		return fmt.Errorf("riverbus: %w", err)
	}
	if err := c.checkSchema(ctx); err != nil {
		return err
	}
	var rc *river.Client[pgx.Tx]
	slots := map[string]int{}
	if c.cfg.Workers != nil && len(c.cfg.Workers.Pools()) > 0 {
		if err := c.cfg.Workers.CheckVersions(); err != nil {
			return err
		}
		queues, ordered, err := c.bindQueues(ctx)
		if err != nil {
			return err
		}
		rcfg, err := workers.RiverConfig(workers.RiverOpts{Queues: queues, Ordered: ordered, Workers: c.cfg.Workers.RiverWorkers(), DB: c.db, Config: c.cfg.Work})
		if err != nil {
			return fmt.Errorf("riverbus: workers: %w", err)
		}
		if rc, err = river.NewClient(workers.NewDriver(c.db, c.logger), rcfg); err != nil {
			return fmt.Errorf("riverbus: workers: %w", err)
		}
		for queue, qc := range rcfg.Queues {
			slots[queue] = qc.MaxWorkers
		}
	}
	var services []service.Service
	if c.fanout != nil {
		services = append(c.fanout.Services().All(), c.advancer)
	}
	if c.retainer != nil {
		services = append(services, c.retainer)
	}
	c.reporter = nil
	if c.cfg.ReportInterval != -1 && (len(services) > 0 || rc != nil) {
		c.reporter = health.NewReporter(c.db, c.failures, &health.ReporterConfig{
			Name: c.cfg.ProcessName, Fanout: c.fanout != nil, Queues: slots, Interval: c.cfg.ReportInterval, Logger: c.logger,
		})
		services = append(services, c.reporter)
	}
	if rc != nil {
		if err := rc.Start(ctx); err != nil {
			return fmt.Errorf("riverbus: start workers: %w", err)
		}
	}
	runCtx, cancel := c.gate.Context(context.WithoutCancel(ctx))
	c.cancel, c.river, c.started = cancel, rc, true
	c.stopped = make(chan struct{})
	haltCtx, haltCancel := context.WithCancel(context.Background())
	c.haltMu.Lock()
	c.haltCancel = haltCancel
	c.haltMu.Unlock()
	go c.haltOnGate(haltCtx, c.stopped)
	services = append(services, c.watcher)
	// The fan-out's services (horizon, pools, lane sweeper, late-event
	// retirer, the listener that wakes them), the checkpoint advancer and
	// the retention service, each in a goroutine of its own until Stop.
	for _, s := range services {
		c.goService(func() { _ = s.Run(runCtx) })
	}
	return nil
}

// ErrTransactionPooler is matched (errors.Is) by the error of Start, and of
// migrations.Up, when the pool leads through a connection pooler that hands
// server connections to other clients between transactions (PgBouncer's
// transaction or statement mode). The fan-out and the workers need a
// session of their own; appends work through such a pooler.
var ErrTransactionPooler = pooler.ErrTransactionPooler

// checkSession refuses to start the fan-out or the workers through a
// transaction pooler: their wake-ups, River's leadership and notifier and
// the pauses sent to workers would be lost without an error.
func (c *Client) checkSession(ctx context.Context) error {
	var who string
	switch {
	case c.fanout != nil:
		who = "riverbus: fan-out"
	case c.cfg.Workers != nil && len(c.cfg.Workers.Pools()) > 0:
		who = "riverbus: workers"
	default:
		return nil
	}
	return pooler.Check(ctx, c.db.Config().ConnConfig, who)
}

func (c *Client) goService(run func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		run()
	}()
}

// Stop stops the fan-out services, then the workers: they finish the jobs
// they hold until ctx ends, when the jobs still running are cancelled (River's
// StopAndCancel) and Stop returns ctx's error. Stop on a client that is not
// started returns nil.
func (c *Client) Stop(ctx context.Context) error {
	c.haltMu.Lock()
	if c.haltCancel != nil {
		c.haltCancel()
	}
	c.haltMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	var err error
	if c.river != nil {
		if err = c.river.Stop(ctx); err != nil {
			cancelCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopAndCancelTimeout)
			_ = c.river.StopAndCancel(cancelCtx)
			cancel()
		}
	}
	c.started, c.river = false, nil
	close(c.stopped)
	return err
}

// haltOnGate stops the Client when its gate stops (the schema needs newer
// code), unless it stopped first (stopped closed): the services have
// already ended, River stops fetching and lets the running jobs finish,
// until a call of Stop ends that wait.
func (c *Client) haltOnGate(ctx context.Context, stopped <-chan struct{}) {
	select {
	case <-stopped:
		return
	case <-c.gate.Stopped():
	}
	args := []any{"error", c.gate.Err()}
	if e := migrations.AsSchemaTooNew(c.gate.Err()); e != nil {
		args = append(args, "schema_version", e.Schema, "schema_needs", e.Needs, "code_version", e.Code)
	}
	c.logger.Error("riverbus stopped delivering: the schema needs newer code; replace this process with a newer build", args...)
	_ = c.Stop(ctx)
}

// Err returns why the Client stopped on its own: a *migrations.SchemaTooNewError
// once the schema needs newer code than this build (a newer build
// migrated the database while it ran), or nil.
func (c *Client) Err() error { return c.gate.Err() }

// Stopped returns a channel closed when the client is not running: at once
// before Start, and when Stop finishes, or when the Client stopped on its
// own (Err).
func (c *Client) Stopped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// River returns the River client that works the pools' jobs, nil before
// Start or when Config.Workers has no worker. Use it for what River offers
// beyond riverbus (subscriptions, queue settings); pool jobs are inserted by
// the fan-out only.
func (c *Client) River() *river.Client[pgx.Tx] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.river
}

func (c *Client) checkSchema(ctx context.Context) error {
	err := migrations.Check(ctx, c.db, c.gate.Code())
	switch {
	case errors.Is(err, migrations.ErrOlderSchema):
		return fmt.Errorf("%w: %w: run migrations.Up", ErrNotMigrated, err)
	case err != nil:
		return fmt.Errorf("riverbus: %w", err)
	}
	return nil
}

// bindQueues returns the River queues the workers fetch from, with their
// MaxWorkers, and which of them hold ordered pools, after checking that
// every pool with a worker exists and every pool in those queues has a
// worker. A pool made ordered after Start runs in its queue as it was
// bound (correct, with fewer River slots than an ordered queue gets).
func (c *Client) bindQueues(ctx context.Context) (map[string]int, []string, error) {
	all, err := pools.List(ctx, c.db)
	if err != nil {
		return nil, nil, fmt.Errorf("riverbus: list pools: %w", err)
	}
	byName := map[string]*bustype.Pool{}
	inQueue := map[string][]string{}
	for _, p := range all {
		byName[p.Name] = p
		inQueue[p.Queue] = append(inQueue[p.Queue], p.Name)
	}
	queues := map[string]int{}
	var missing []string
	for _, name := range c.cfg.Workers.Pools() {
		p, ok := byName[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		n, _ := c.cfg.Workers.MaxWorkers(name)
		queues[p.Queue] = min(queues[p.Queue]+n, river.QueueNumWorkersMax)
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("riverbus: workers are registered for %s, which %s not exist: create the pool (Client.PoolCreate) before starting its workers: %w",
			quoteList(missing), plural(len(missing), "does", "do"), bustype.ErrUnknownPool)
	}
	for _, queue := range slices.Sorted(maps.Keys(queues)) {
		var without []string
		for _, name := range inQueue[queue] {
			if _, ok := c.cfg.Workers.MaxWorkers(name); !ok {
				without = append(without, name)
			}
		}
		if len(without) > 0 {
			return nil, nil, fmt.Errorf("riverbus: River queue %q also holds pool(s) %s, which have no worker here: this client would fetch their jobs and fail them; add workers for them too, or give the pools queues of their own",
				queue, quoteList(without))
		}
	}
	var ordered []string
	for _, queue := range slices.Sorted(maps.Keys(queues)) {
		if slices.ContainsFunc(inQueue[queue], func(name string) bool { return byName[name].Ordering != bustype.OrderingNone }) {
			ordered = append(ordered, queue)
		}
	}
	return queues, ordered, nil
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// stopAndCancelTimeout bounds how long Stop waits for cancelled jobs to
// return after its own context ended.
const stopAndCancelTimeout = 5 * time.Second
