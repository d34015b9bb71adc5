package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/service"
)

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
	res  BatchResult
	full bool
	err  error
}

// poolServiceConfig is the pools' service's configuration.
type poolServiceConfig struct {
	// Workers is how many batches may run at once (Config.Workers).
	Workers int
	// PollInterval is how often the pools due are listed, and each gets a
	// batch, when nothing woke the service (Config.PollInterval).
	PollInterval time.Duration
	// Logger receives the failures.
	Logger *slog.Logger
	// OnLateFunc, when set, is called after a batch delivered late
	// events: the late-event retirer may now retire them.
	OnLateFunc func()
}

// PoolService fans out every active pool, each on its own, one batch at a
// time per pool (Fanout.fanOutPool).
type PoolService struct {
	f        *Fanout
	cfg      poolServiceConfig
	wake     chan struct{}
	moved    chan struct{} // horizonMoved
	ownMoved chan struct{} // roundMoved
	analyzer *jobAnalyzer

	// The latest sqlPoolsDue of a round's ride, and whether Run applied it.
	dueMu      sync.Mutex
	dueLast    *dueResult
	dueApplied bool

	// TestSignals lets tests wait for what Run did.
	TestSignals PoolTestSignals
}

// PoolTestSignals are the pools' service's test signals, for tests (of this
// package and others, through Fanout.Services) that wait for a batch.
type PoolTestSignals struct {
	// BatchDone receives the result of every batch Run committed (empty
	// ones included).
	BatchDone service.TestSignal[BatchResult]
	// Analyzed receives a value after every ANALYZE of river_job
	// (jobAnalyzer), failed or not.
	Analyzed service.TestSignal[struct{}]
}

// Init makes every signal record values; tests only, before Run.
func (ts *PoolTestSignals) Init(tb service.TB) {
	ts.BatchDone.Init(tb)
	ts.Analyzed.Init(tb)
}

func newPoolService(f *Fanout, cfg poolServiceConfig) *PoolService {
	return &PoolService{f: f, cfg: cfg, wake: service.NewWake(), moved: service.NewWake(), ownMoved: service.NewWake()}
}

// Wake asks Run to list the active pools and the pools due again, and to
// run a batch of each pool due.
func (s *PoolService) Wake() { service.Wake(s.wake) }

// horizonMoved asks Run for a batch of every active pool the move
// concerns: the horizon moved (or a round found late events). Which pools
// those are, sqlPoolsDue says (due.go).
func (s *PoolService) horizonMoved() { service.Wake(s.moved) }

// roundMoved is horizonMoved after a round of this instance, whose last
// round trip ran sqlPoolsDue after its rides (ride.go): the pools due are
// known without a round trip of their own.
func (s *PoolService) roundMoved() { service.Wake(s.ownMoved) }

// setDue hands Run what sqlPoolsDue returned in a round's last round trip.
func (s *PoolService) setDue(r dueResult) {
	s.dueMu.Lock()
	defer s.dueMu.Unlock()
	s.dueLast, s.dueApplied = &r, false
}

// takeDue returns the latest sqlPoolsDue of a round, and whether Run
// already applied it.
func (s *PoolService) takeDue() (r *dueResult, applied bool) {
	s.dueMu.Lock()
	defer s.dueMu.Unlock()
	r, applied = s.dueLast, s.dueApplied
	s.dueApplied = true
	return r, applied
}

// listing says which list of the pools due Run reads next.
type listing uint8

const (
	listNone listing = iota
	listDue          // the pools due
	listAll          // the pools due and every active pool: a wake-up or the poll interval
)

type listResult struct {
	due dueResult
	all bool
	err error
}

// Run fans out every active pool until ctx ends, each on its own: a batch
// per pool at a time, at most Config.Workers batches at once, the
// pools that waited longest first. A pool runs again at once while its
// batches are full, and when the horizon moved and the move concerns it
// (sqlPoolsDue: a matching event above its cursor, late events), which a
// round of this instance says in its last round trip, else a list of the
// pools due read in a goroutine of its own; at a wake-up (Wake) and every
// poll interval, the list also prunes the pools no longer active. Idle
// pools are moved up by that statement, and Run lists again when it left
// some below the horizon. A failing pool backs off alone: the others go on
// at their own pace, and so they do while one pool's batch is slow. A
// batch that delivered late events wakes the late-event retirer. As the
// jobs inserted grow river_job, it is analyzed now and then
// (jobAnalyzer). Run returns nil when ctx ends, after the batches in
// flight.
func (s *PoolService) Run(ctx context.Context) error {
	// A batch that finds the schema needs newer code stops the gate, and
	// this loop then ends as when ctx ends.
	ctx, cancel := s.f.gate.Context(ctx)
	defer cancel()
	defer s.analyzer.wait()
	pools := map[string]*poolRun{}
	done := make(chan poolDone)
	listed := make(chan listResult, 1)
	running := 0
	want := listAll // the list wanted next
	inList := false // a list is being read
	var nextList, nextIdle time.Time
	listBackoff := time.Duration(0)
	// apply makes the pools d names due; with all, d lists every active
	// pool and the others are forgotten.
	apply := func(d *dueResult, all bool, now time.Time) {
		for _, n := range d.due {
			st := pools[n]
			if st == nil {
				st = &poolRun{}
				pools[n] = st
			}
			st.due = true
		}
		if all {
			active := make(map[string]bool, len(d.active))
			for _, n := range d.active {
				active[n] = true
			}
			for n, st := range pools {
				if !active[n] && !st.running {
					delete(pools, n)
				}
			}
		}
		if d.lagging && (nextIdle.IsZero() || now.Add(idleCursorInterval).Before(nextIdle)) {
			nextIdle = now.Add(idleCursorInterval)
		}
	}
	for {
		now := time.Now()
		if want != listNone && !inList && ctx.Err() == nil {
			all := want == listAll
			want, inList, nextIdle = listNone, true, time.Time{}
			go func() {
				due, err := s.f.poolsDue(ctx, all)
				listed <- listResult{due: due, all: all, err: err}
			}()
		}
		if ctx.Err() == nil && running < s.cfg.Workers {
			var ready []string
			for n, st := range pools {
				if st.due && !st.running && !now.Before(st.retryAt) {
					ready = append(ready, n)
				}
			}
			slices.SortFunc(ready, func(a, b string) int { return pools[a].lastStart.Compare(pools[b].lastStart) })
			for _, n := range ready {
				if running == s.cfg.Workers {
					break
				}
				st := pools[n]
				st.running, st.due, st.lastStart = true, false, now
				running++
				go func() {
					res, full, err := s.f.fanOutPool(ctx, n)
					done <- poolDone{name: n, res: res, full: full, err: err}
				}()
			}
		}
		wake := nextList
		if inList {
			wake = now.Add(s.cfg.PollInterval) // the list's result wakes the loop
		} else if !nextIdle.IsZero() && nextIdle.Before(wake) {
			wake = nextIdle
		}
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
			if inList {
				<-listed
			}
			return nil
		case l := <-listed:
			timer.Stop()
			inList = false
			now := time.Now()
			if s.f.gate.Stop(l.err) {
				s.cfg.Logger.Error("fan-out stopped: the schema needs newer code", "error", l.err)
				continue // the gate's context ends the loop
			}
			if l.err != nil {
				if ctx.Err() == nil {
					listBackoff = service.NextBackoff(listBackoff)
					s.cfg.Logger.Error("list the pools due failed; running every pool, and retrying", health.Operation(health.OpListPools), "error", l.err, "retry_in", listBackoff)
				}
				// Without the list, every pool known runs: a batch finds
				// for itself whether it has anything to do.
				for _, st := range pools {
					st.due = true
				}
				nextList = now.Add(service.Jitter(listBackoff))
				continue
			}
			listBackoff = 0
			apply(&l.due, l.all, now)
			if l.all {
				nextList = now.Add(s.cfg.PollInterval)
			}
		case d := <-done:
			timer.Stop()
			running--
			st := pools[d.name]
			st.running = false
			switch {
			case s.f.gate.Stop(d.err):
				s.cfg.Logger.Error("fan-out stopped: the schema needs newer code", "pool", d.name, "error", d.err)
			case d.err != nil:
				if ctx.Err() != nil {
					continue
				}
				st.backoff = service.NextBackoff(st.backoff)
				wait := service.Jitter(st.backoff)
				st.retryAt, st.due = time.Now().Add(wait), true
				s.cfg.Logger.Error("fan-out of pool failed; retrying it", health.Operation(health.OpPoolBatch), "pool", d.name, "error", d.err, "retry_in", wait.Round(time.Millisecond))
			default:
				st.backoff, st.retryAt = 0, time.Time{}
				st.due = st.due || d.full
				if d.res.Late > 0 && s.cfg.OnLateFunc != nil {
					s.cfg.OnLateFunc()
				}
				s.TestSignals.BatchDone.Signal(d.res)
				s.analyzer.add(ctx, d.res.Jobs, func() { s.TestSignals.Analyzed.Signal(struct{}{}) })
			}
		case <-s.moved:
			timer.Stop()
			want = max(want, listDue)
		case <-s.ownMoved:
			timer.Stop()
			d, applied := s.takeDue()
			switch {
			case d == nil || d.horizon == nil || *d.horizon < s.f.horizon():
				// The round's own list did not run, or is older than a
				// later round of this instance: read one.
				want = max(want, listDue)
			case !applied:
				apply(d, false, time.Now())
			}
		case <-s.wake:
			timer.Stop()
			want = listAll
		case <-timer.C:
			switch now := time.Now(); {
			case inList:
			case !now.Before(nextList):
				want = listAll
			case !nextIdle.IsZero() && !now.Before(nextIdle):
				want = max(want, listDue)
			}
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
