package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/riverbus/riverbus/fanout"
)

const horizonPageSize = 10_000

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
type Fanout struct {
	db     *pgxpool.Pool
	cfg    fanout.Config
	logger *slog.Logger

	mu    sync.Mutex
	stats Stats

	// wake wakes the horizon loop, wakePools the pools' loop;
	// lateDelivered tells the horizon loop that a pool delivered late
	// events, which may now be retired.
	wake, wakePools, lateDelivered chan struct{}
	// roundPIDs are the backends that ran this instance's horizon rounds:
	// their riverbus_horizon notifications need not wake it.
	roundPIDs sync.Map
	// plain is, per pool, what its last batch found out about the plain
	// path (plain.go). Guarded by mu.
	plain map[string]plainKind
	// problemLog paces the ERROR logs of broken assumptions (horizon.go).
	problemLog problemLog
	// noPlain: the plain path's statement cannot run on this server.
	// Guarded by mu.
	noPlain bool
}

// New validates cfg and returns a Fanout. It does not touch the database.
func New(db *pgxpool.Pool, cfg *fanout.Config) (*Fanout, error) {
	c := fanout.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.GapTimeout = cmp.Or(c.GapTimeout, fanout.GapTimeoutDefault)
	c.GapCheckInterval = cmp.Or(c.GapCheckInterval, fanout.GapCheckIntervalDefault)
	c.PollInterval = cmp.Or(c.PollInterval, fanout.PollIntervalDefault)
	if c.BatchSize == 0 {
		c.BatchSize = fanout.BatchSizeDefault
	}
	if c.Workers == 0 {
		c.Workers = fanout.WorkersDefault
	}
	switch {
	case c.GapTimeout < 0:
		return nil, fmt.Errorf("GapTimeout must be positive, got %s", c.GapTimeout)
	case c.GapCheckInterval < 0:
		return nil, fmt.Errorf("GapCheckInterval must be positive, got %s", c.GapCheckInterval)
	case c.PollInterval < 0:
		return nil, fmt.Errorf("PollInterval must be positive, got %s", c.PollInterval)
	case c.BatchSize < 1 || c.BatchSize > 100_000:
		return nil, fmt.Errorf("BatchSize must be between 1 and 100000, got %d", c.BatchSize)
	case c.Workers < 1:
		return nil, fmt.Errorf("Workers must be at least 1, got %d", c.Workers)
	}
	if db == nil {
		return nil, errors.New("fanout.New: db is nil")
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Fanout{
		db: db, cfg: c, logger: logger.With("component", "fanout"),
		stats: Stats{EventsFannedOut: map[string]int64{}, LateDelivered: map[string]int64{}, Undeliverable: map[string]int64{}},
		plain: map[string]plainKind{},
		wake:  make(chan struct{}, 1), wakePools: make(chan struct{}, 1), lateDelivered: make(chan struct{}, 1),
	}, nil
}

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

// Wake asks Run for a horizon round and a batch of every pool now, as a
// notification does.
func (f *Fanout) Wake() {
	signal(f.wake)
	signal(f.wakePools)
}

// Run advances the horizon and fans out until ctx ends, then returns nil. A
// batch in flight when ctx ends is rolled back, never half applied. The
// horizon advances in a loop of its own, and each pool is fanned out on its
// own (horizonLoop, poolLoop): database errors are logged and retried with a
// backoff of their own, the horizon's or one pool's, and never end Run nor
// delay another pool.
func (f *Fanout) Run(ctx context.Context) error {
	listenCtx, stopListen := context.WithCancel(ctx)
	var wg sync.WaitGroup
	listener := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, f.db.Config().ConnConfig.Copy())
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				f.logger.Warn("listener: reconnecting", "error", err)
			}
		},
		ReconnectDelay: time.Second,
	}
	h := &wakeHandler{f: f}
	listener.Handle("riverbus_event", h)
	listener.Handle("riverbus_horizon", h)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = listener.Listen(listenCtx)
	}()
	defer func() {
		stopListen()
		wg.Wait()
	}()

	wg.Add(1)
	go func() {
		defer wg.Done()
		f.sweepLoop(listenCtx)
	}()

	wg.Add(1)
	go func() {
		defer wg.Done()
		f.horizonLoop(listenCtx)
	}()
	f.poolLoop(ctx)
	return nil
}

// horizonLoop advances the horizon until ctx ends: at once again while it
// moves a full page, soon while it waits at a gap, else when woken or at
// the poll interval. Every move wakes the pools' loop. It also retires late
// events that every pool has handled. Its errors back off on their own and
// never delay a pool.
func (f *Fanout) horizonLoop(ctx context.Context) {
	backoff := time.Duration(0)
	retire := false
	for {
		round, err := f.round(ctx)
		if err == nil {
			if round.Moved {
				signal(f.wakePools)
			}
			retire = retire || round.Late > 0 || round.LatePending > 0
			if retire {
				// After the pools: the late events marked by an earlier
				// round, which the pools have had a chance to handle.
				// While a late record is left, every round tries again: a
				// pool that lagged behind handles the event on its normal
				// path, which signals no late delivery.
				if _, err = RetireLateEvents(ctx, f.db); err == nil {
					retire = round.Late > 0 || round.LatePending > 0
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case err != nil:
			backoff = nextBackoff(backoff)
			wait = jitter(backoff)
			f.logger.Error("horizon round failed; retrying", "error", err, "retry_in", wait.Round(time.Millisecond))
		case round.More && round.Moved:
			backoff = 0
			continue
		case !round.Locked || round.Holding:
			// Another instance holds the horizon (it may wait at a gap),
			// or this one waits at a gap.
			backoff = 0
			wait = f.cfg.GapCheckInterval
		default:
			backoff = 0
			wait = f.cfg.PollInterval
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-f.wake:
			timer.Stop()
			if err != nil {
				// Still wait out the backoff, but no longer than needed.
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		case <-f.lateDelivered:
			timer.Stop()
			retire = true
		case <-timer.C:
		}
	}
}

// round runs one horizon round and records it.
func (f *Fanout) round(ctx context.Context) (RoundResult, error) {
	round, err := AdvanceHorizon(ctx, f.db, f.cfg.GapTimeout, horizonPageSize)
	if err != nil {
		return round, err
	}
	f.recordRound(round)
	if round.pid != 0 {
		f.roundPIDs.Store(round.pid, struct{}{})
	}
	return round, nil
}

// poolRun is what the pools' loop knows of one pool.
type poolRun struct {
	running   bool
	due       bool // a batch is wanted: woken, or the last one was full or failed
	backoff   time.Duration
	retryAt   time.Time // after a failure, no batch before this
	lastStart time.Time
}

type poolDone struct {
	name string
	res  fanout.BatchResult
	full bool
	err  error
}

// poolLoop fans out every active pool until ctx ends, each on its own: a
// batch per pool at a time, at most fanout.Config.Workers batches at once, the
// pools that waited longest first. A pool runs again at once while its
// batches are full, and when woken (the horizon moved, a notification, the
// poll interval). A failing pool backs off alone: the others go on at their
// own pace, and so they do while one pool's batch is slow.
func (f *Fanout) poolLoop(ctx context.Context) {
	pools := map[string]*poolRun{}
	done := make(chan poolDone)
	running := 0
	refresh := true
	var nextList time.Time
	listBackoff := time.Duration(0)
	for {
		now := time.Now()
		if refresh && ctx.Err() == nil {
			names, err := f.activePools(ctx)
			if err != nil {
				if ctx.Err() == nil {
					listBackoff = nextBackoff(listBackoff)
					f.logger.Error("list active pools failed; retrying", "error", err, "retry_in", listBackoff)
				}
				nextList = now.Add(jitter(listBackoff))
			} else {
				listBackoff = 0
				active := make(map[string]bool, len(names))
				for _, n := range names {
					active[n] = true
					st := pools[n]
					if st == nil {
						st = &poolRun{}
						pools[n] = st
					}
					st.due = true
				}
				for n, st := range pools {
					if !active[n] && !st.running {
						delete(pools, n)
					}
				}
				nextList = now.Add(f.cfg.PollInterval)
			}
			refresh = false
		}
		if ctx.Err() == nil && running < f.cfg.Workers {
			var ready []string
			for n, st := range pools {
				if st.due && !st.running && !now.Before(st.retryAt) {
					ready = append(ready, n)
				}
			}
			slices.SortFunc(ready, func(a, b string) int { return pools[a].lastStart.Compare(pools[b].lastStart) })
			for _, n := range ready {
				if running == f.cfg.Workers {
					break
				}
				st := pools[n]
				st.running, st.due, st.lastStart = true, false, now
				running++
				go func() {
					res, full, err := f.FanOutPool(ctx, n)
					done <- poolDone{name: n, res: res, full: full, err: err}
				}()
			}
		}
		wake := nextList
		for _, st := range pools {
			if st.due && !st.running && st.retryAt.After(now) && st.retryAt.Before(wake) {
				wake = st.retryAt
			}
		}
		timer := time.NewTimer(max(time.Until(wake), 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			for ; running > 0; running-- {
				<-done
			}
			return
		case d := <-done:
			timer.Stop()
			running--
			st := pools[d.name]
			st.running = false
			switch {
			case d.err != nil:
				if ctx.Err() != nil {
					continue
				}
				st.backoff = nextBackoff(st.backoff)
				wait := jitter(st.backoff)
				st.retryAt, st.due = time.Now().Add(wait), true
				f.logger.Error("fan-out of pool failed; retrying it", "pool", d.name, "error", d.err, "retry_in", wait.Round(time.Millisecond))
			default:
				st.backoff, st.retryAt = 0, time.Time{}
				st.due = st.due || d.full
				if d.res.Late > 0 {
					signal(f.lateDelivered)
				}
			}
		case <-f.wakePools:
			timer.Stop()
			refresh = true
		case <-timer.C:
			refresh = refresh || !time.Now().Before(nextList)
		}
	}
}

func (f *Fanout) activePools(ctx context.Context) ([]string, error) {
	rows, err := f.db.Query(ctx, sqlActivePoolNames)
	if err != nil {
		return nil, fmt.Errorf("list active pools: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list active pools: %w", err)
	}
	return names, nil
}

// nextBackoff doubles a failure backoff, from 100 ms to at most 10 s.
func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, 100*time.Millisecond), 10*time.Second)
}

// jitter adds up to a quarter of d, so instances that failed together do
// not retry together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}

// signal wakes the loop that waits on ch, unless a wake-up is already
// waiting.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sweepLoop is the safety net of ordered pools, beside the passes so it
// never delays one: due retries are promoted every sweepInterval, and lanes
// left with pending jobs and none in flight are released every
// stuckLaneInterval. Failures are logged and retried with backoff.
func (f *Fanout) sweepLoop(ctx context.Context) {
	var lastStuck time.Time
	backoff := time.Duration(0)
	for {
		wait := sweepInterval
		err := func() error {
			if _, err := PromoteLaneRetries(ctx, f.db); err != nil {
				return err
			}
			if time.Since(lastStuck) < stuckLaneInterval {
				return nil
			}
			lastStuck = time.Now()
			n, err := ReleaseStuckLanes(ctx, f.db)
			if n > 0 {
				f.logger.Warn("released ordered lanes that had no job in flight", "jobs", n)
			}
			return err
		}()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			backoff = min(max(2*backoff, sweepInterval), 10*time.Second)
			wait = backoff
			f.logger.Warn("ordered pools' sweep failed; retrying", "error", err, "retry_in", wait)
		default:
			backoff = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

const (
	sweepInterval     = 250 * time.Millisecond
	stuckLaneInterval = 2 * time.Second
)

type wakeHandler struct{ f *Fanout }

func (h *wakeHandler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	if n.Channel == "riverbus_horizon" {
		if _, own := h.f.roundPIDs.Load(n.PID); own {
			// This instance's own round: the pass that ran it fans out
			// next anyway. Waking again would only run an empty pass.
			return nil
		}
	}
	h.f.Wake()
	return nil
}

// HandleBacklog runs after LISTEN is in place: wake once, so nothing that
// committed before the listener (re)connected waits for the poll interval.
func (h *wakeHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	h.f.Wake()
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
// for every active pool that this instance can lock. Run calls it in a loop;
// tests call it directly.
func (f *Fanout) Pass(ctx context.Context) (PassResult, error) {
	var res PassResult
	for range 10 {
		round, err := f.round(ctx)
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
			b, full, err := f.FanOutPool(ctx, name)
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
		_, firstErr = RetireLateEvents(ctx, f.db)
	}
	res.More = res.More || (res.Horizon.More && res.Horizon.Moved)
	return res, firstErr
}

func (f *Fanout) recordRound(r RoundResult) {
	if !r.Locked {
		return
	}
	f.mu.Lock()
	f.stats.Horizon = r.Horizon
	f.stats.GapsProvenDead += r.ProvenDead
	f.stats.GapsSkipped += r.Skipped
	f.stats.LateEvents += r.Late
	f.mu.Unlock()
	f.problemLog.log(f.logger, r.Problems)
	if r.Skipped > 0 {
		f.logger.Warn("gap timeout: horizon skipped missing sequences; they are watched and will be delivered late if they commit",
			"count", r.Skipped, "horizon", r.Horizon, "gap_timeout", f.cfg.GapTimeout)
	}
	if r.Late > 0 {
		f.logger.Warn("late events: skipped sequences committed after their gap timed out; delivering them to pools that passed them",
			"count", r.Late)
	}
	if r.ProvenDead > 0 {
		f.logger.Debug("gap proven rolled back", "sequences", r.ProvenDead, "horizon", r.Horizon)
	}
}
