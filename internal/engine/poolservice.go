package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverbus/riverbus/fanout"
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
	res  fanout.BatchResult
	full bool
	err  error
}

// PoolServiceConfig is the pools' service's configuration.
type PoolServiceConfig struct {
	// Workers is how many batches may run at once (fanout.Config.Workers).
	Workers int
	// PollInterval is how often the active pools are listed and each gets
	// a batch when nothing woke the service (fanout.Config.PollInterval).
	PollInterval time.Duration
	// Logger receives the failures.
	Logger *slog.Logger
	// OnLateFunc, when set, is called after a batch delivered late
	// events: the late-event retirer may now retire them.
	OnLateFunc func()
}

// PoolService fans out every active pool, each on its own, one batch at a
// time per pool (Fanout.FanOutPool).
type PoolService struct {
	f        *Fanout
	cfg      PoolServiceConfig
	wake     chan struct{}
	moved    chan struct{} // HorizonMoved
	ownMoved chan struct{} // roundMoved
	analyzer *jobAnalyzer

	// TestSignals lets tests wait for what Run did.
	TestSignals PoolTestSignals
}

// PoolTestSignals are the pools' service's test signals.
type PoolTestSignals struct {
	// BatchDone receives the result of every batch Run committed (empty
	// ones included).
	BatchDone service.TestSignal[fanout.BatchResult]
	// Analyzed receives a value after every ANALYZE of river_job
	// (jobAnalyzer), failed or not.
	Analyzed service.TestSignal[struct{}]
}

// Init makes every signal record values; tests only, before Run.
func (ts *PoolTestSignals) Init(tb service.TB) {
	ts.BatchDone.Init(tb)
	ts.Analyzed.Init(tb)
}

func newPoolService(f *Fanout, cfg PoolServiceConfig) *PoolService {
	return &PoolService{f: f, cfg: cfg, wake: service.NewWake(), moved: service.NewWake(), ownMoved: service.NewWake()}
}

// Wake asks Run to list the active pools again and run a batch of each.
func (s *PoolService) Wake() { service.Wake(s.wake) }

// HorizonMoved asks Run for a batch of every active pool it knows of now,
// without waiting for a list: the horizon moved (or a round found late
// events). The pools are listed again beside the batches, and a pool new
// to the list gets one too.
func (s *PoolService) HorizonMoved() { service.Wake(s.moved) }

// roundMoved is HorizonMoved after a round of this instance, whose ride
// (ride.go) may have fanned out some pools up to the new horizon already:
// those are left out.
func (s *PoolService) roundMoved() { service.Wake(s.ownMoved) }

// listing says which pools a list of the active pools makes due.
type listing uint8

const (
	listNone listing = iota
	listNew          // the pools new to the list: the others were just made due
	listAll          // every pool listed: a wake-up or the poll interval
)

type listResult struct {
	names []string
	all   bool
	err   error
}

// Run fans out every active pool until ctx ends, each on its own: a batch
// per pool at a time, at most fanout.Config.Workers batches at once, the
// pools that waited longest first. A pool runs again at once while its
// batches are full, and when woken: the horizon moved (HorizonMoved: the
// pools known start at once, the list is read beside them), a wake-up
// (Wake) or the poll interval (the pools are listed first). The list is
// read in a goroutine of its own, so a batch never waits for it. A failing
// pool backs off alone: the others go on at their own pace, and so they do
// while one pool's batch is slow. A batch that delivered late events wakes
// the late-event retirer. As the jobs inserted grow river_job, it is
// analyzed now and then (jobAnalyzer). Run returns nil when ctx ends, after
// the batches in flight.
func (s *PoolService) Run(ctx context.Context) error {
	defer s.analyzer.wait()
	pools := map[string]*poolRun{}
	done := make(chan poolDone)
	listed := make(chan listResult, 1)
	running := 0
	want := listAll // the list wanted next
	inList := false // a list is being read
	var nextList time.Time
	listBackoff := time.Duration(0)
	for {
		now := time.Now()
		if want != listNone && !inList && ctx.Err() == nil {
			all := want == listAll
			want, inList = listNone, true
			go func() {
				names, err := s.f.activePools(ctx)
				listed <- listResult{names: names, all: all, err: err}
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
					res, full, err := s.f.FanOutPool(ctx, n)
					done <- poolDone{name: n, res: res, full: full, err: err}
				}()
			}
		}
		wake := nextList
		if inList {
			wake = now.Add(s.cfg.PollInterval) // the list's result wakes the loop
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
			if l.err != nil {
				if ctx.Err() == nil {
					listBackoff = service.NextBackoff(listBackoff)
					s.cfg.Logger.Error("list active pools failed; retrying", "error", l.err, "retry_in", listBackoff)
				}
				nextList = now.Add(service.Jitter(listBackoff))
				continue
			}
			listBackoff = 0
			active := make(map[string]bool, len(l.names))
			for _, n := range l.names {
				active[n] = true
				st := pools[n]
				if st == nil {
					st = &poolRun{due: true}
					pools[n] = st
				}
				st.due = st.due || l.all
			}
			for n, st := range pools {
				if !active[n] && !st.running {
					delete(pools, n)
				}
			}
			if l.all {
				nextList = now.Add(s.cfg.PollInterval)
			}
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
				st.backoff = service.NextBackoff(st.backoff)
				wait := service.Jitter(st.backoff)
				st.retryAt, st.due = time.Now().Add(wait), true
				s.cfg.Logger.Error("fan-out of pool failed; retrying it", "pool", d.name, "error", d.err, "retry_in", wait.Round(time.Millisecond))
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
			for _, st := range pools {
				st.due = true
			}
			want = max(want, listNew)
		case <-s.ownMoved:
			timer.Stop()
			for n, st := range pools {
				st.due = st.due || !s.f.atHorizon(n)
			}
			want = max(want, listNew)
		case <-s.wake:
			timer.Stop()
			want = listAll
		case <-timer.C:
			if !inList && !time.Now().Before(nextList) {
				want = listAll
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
