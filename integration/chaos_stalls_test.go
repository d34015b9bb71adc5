package integration_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// chaosStallAfter: a pool whose due jobs nobody has worked for this long, or
// a horizon that has not moved for this long while a committed event waits
// above it, is stalled. Long against every pause the run causes on purpose
// (a worker process restarting is excluded until it is ready; the gap
// timeout is 2 s), short against a forged pause, which River would honour
// until its next poll of the queue's state, a minute later.
const chaosStallAfter = 10 * time.Second

// chaosStallLoad is the load per CPU up to which chaosStallAfter holds
// when TestChaos runs as part of the whole suite (make test): there it
// shares the machine with every other package's tests and whatever else
// runs, each process gets a smaller share of a core and each fan-out round
// and River fetch takes longer, so past this load the bound stretches with
// the 1-minute load average, up to chaosStallStretch times. A stall then
// is a standstill long against what the machine allowed, while a forged
// pause (honoured until River's next poll, a minute later) still shows, and
// a session waiting for the neighbour's locks shows whatever the load. A
// run asked for by itself (make chaos, which sets the duration) keeps
// chaosStallAfter whatever the load: its own 32 writers and their sessions
// load the machine as much, and it is the run that holds the 10 s promise.
const (
	chaosStallLoad    = 4.0
	chaosStallStretch = 3.0
)

// stallAfter is the stall bound for the machine's load now (see
// chaosStallLoad) and the load it read (0 when not read).
func stallAfter() (time.Duration, float64) {
	if chaosOwnMachine() {
		return chaosStallAfter, 0
	}
	load := benchkit.LoadAverage()
	if load < 0 {
		return chaosStallAfter, 0
	}
	f := min(max(load/(chaosStallLoad*float64(runtime.NumCPU())), 1), chaosStallStretch)
	return time.Duration(f * float64(chaosStallAfter)).Round(time.Second), load
}

// chaosCrashQuiet: after the PostgreSQL crash no stall is counted for this
// long, while every River client and fan-out reconnects.
const chaosCrashQuiet = 20 * time.Second

// chaosFanoutStartup: a fan-out process started this long ago is running
// rounds. Kills are 1-4 s apart and spread over five processes, so both
// fan-outs are rarely this young at once.
const chaosFanoutStartup = 5 * time.Second

// chaosStalls watches, every second from the traffic's start to the drain's
// end, for what the drain's deadline alone would miss: a pool or the horizon
// stopped for more than chaosStallAfter and then going on, as one a forged
// pause or a neighbour's lock holds for a while; and any session waiting
// for a lock the neighbour holds (whichever lock: none of riverbus's may be
// one a login with no grant can take). Stalls the run causes
// itself are excluded: a worker process killed is not watched until its new
// process says it is ready and has been for chaosStallAfter; nothing is
// watched while PostgreSQL restarts and for chaosCrashQuiet after; the
// horizon's standstill is counted only while a fan-out process has run for
// chaosFanoutStartup.
type chaosStalls struct {
	db   *pgxpool.Pool
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex
	// Per pool worked by a process: its newest process and the line it
	// prints when ready, until it is seen.
	starting   map[string]chaosStarting
	procOf     map[string]*proc     // per pool worked by a process: its newest process
	quietUntil map[string]time.Time // per pool: no stall counted before
	allQuiet   time.Time            // no stall counted before (the crash)
	crashing   bool
	fanouts    map[string]time.Time // fan-out slot → its process's start

	// Written by the watcher goroutine, read after done.
	since         map[string]time.Time // per pool: a stall seen since (zero: none)
	horizonSince  time.Time
	horizonLast   int64
	stalledPools  map[string]bool
	horizonStalls int
	maxBound      time.Duration // the longest stall bound the load made (stallAfter)
	episodes      []string
	// lockWaits are the sessions seen waiting for a lock the neighbour
	// held: "pid application_name: query".
	lockWaits map[string]bool
}

type chaosStarting struct {
	p     *proc
	ready string
}

// startStallWatch starts the watcher; stopStallWatch ends it.
func (r *chaosRun) startStallWatch() {
	ctx, stop := context.WithCancel(r.ctx)
	s := &chaosStalls{db: r.db, stop: stop, done: make(chan struct{}), starting: map[string]chaosStarting{}, procOf: map[string]*proc{},
		quietUntil: map[string]time.Time{}, fanouts: map[string]time.Time{}, since: map[string]time.Time{}, stalledPools: map[string]bool{},
		lockWaits: map[string]bool{}}
	for _, c := range r.procs {
		s.started(c)
	}
	r.t.Cleanup(stop)
	r.stalls = s
	go s.watch(ctx, r)
}

func (s *chaosStalls) stopStallWatch() {
	s.stop()
	<-s.done
}

// started records a slot's new process (its first, or after a kill or an
// exit).
func (s *chaosStalls) started(c *chaosProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.pool == "" {
		s.fanouts[c.name] = time.Now()
		return
	}
	s.starting[c.pool] = chaosStarting{p: c.p, ready: c.ready}
	s.procOf[c.pool] = c.p
}

// crash brackets the PostgreSQL crash: nothing is watched from its start
// until chaosCrashQuiet after it ended.
func (s *chaosStalls) crash(ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashing = !ended
	if ended {
		s.allQuiet = time.Now().Add(chaosCrashQuiet)
	}
}

// quiet reports whether no stall of pool may be counted now.
func (s *chaosStalls) quiet(pool string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashing || now.Before(s.allQuiet) {
		return true
	}
	if st, ok := s.starting[pool]; ok {
		if !strings.Contains(st.p.out.String(), st.ready) {
			return true
		}
		delete(s.starting, pool)
		s.quietUntil[pool] = now.Add(chaosStallAfter)
	}
	return now.Before(s.quietUntil[pool])
}

// horizonQuiet reports whether the horizon's standstill may not be counted
// now: no fan-out process has run for chaosFanoutStartup.
func (s *chaosStalls) horizonQuiet(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crashing || now.Before(s.allQuiet) {
		return true
	}
	for _, at := range s.fanouts {
		if now.Sub(at) >= chaosFanoutStartup {
			return false
		}
	}
	return true
}

// sqlPoolStalls finds, per pool, whether it has a job due for
// chaosStallAfter ($1) that nothing has taken, while no job of the pool
// started or finished within that time. A pool or a River queue the
// operator paused is not watched.
const sqlPoolStalls = `SELECT p.name,
	EXISTS (SELECT 1 FROM river_job j WHERE j.state = 'available' AND j.queue = p.queue AND j.kind = p.name AND j.scheduled_at < now() - $1::interval)
	AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.state IN ('completed', 'discarded', 'cancelled') AND j.finalized_at > now() - $1::interval AND j.kind = p.name)
	AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.state IN ('running', 'retryable') AND j.attempted_at > now() - $1::interval AND j.kind = p.name)
FROM riverbus_pool p WHERE p.status = 'active'
	AND NOT EXISTS (SELECT 1 FROM river_queue q WHERE q.name = p.queue AND q.paused_at IS NOT NULL)`

// sqlNeighbourWaiters lists the sessions waiting for a lock that a session
// of the neighbour's role ($1) holds or waits ahead of them for. Not
// counted: waits for an object lock, which is how PostgreSQL's lock on the
// notification queue shows (an "object" lock on pg_database, object 0),
// taken by every transaction that sent a NOTIFY at COMMIT through its WAL
// flush. The neighbour's forged messages take it too, and any login may
// NOTIFY, so a commit that sends a wake-up (an appender's, a worker's lane
// release) may queue behind theirs for a moment; nobody can hold it idle.
//
// The lock waited for is read from one pg_locks snapshot (one call, taken
// under all of the lock manager's partition locks), and the neighbour must
// hold or await that same lock there as well as block the session in
// pg_blocking_pids, a second, later look. pg_stat_activity's wait event
// cannot tell it: it is read once per transaction, so a session that
// waited for another worker's row a moment before and now waits on the
// notification queue behind a forged NOTIFY read as blocked by the
// neighbour on the row.
const sqlNeighbourWaiters = `WITH l AS MATERIALIZED (SELECT locktype, database, relation, page, tuple, virtualxid, transactionid, classid, objid, objsubid, pid, granted FROM pg_locks)
SELECT DISTINCT a.pid || ' ' || coalesce(a.application_name, '') || ': ' || left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 100)
FROM l w JOIN pg_stat_activity a ON a.pid = w.pid
WHERE NOT w.granted AND w.locktype <> 'object' AND a.usename IS DISTINCT FROM $1
	AND EXISTS (SELECT 1 FROM l h JOIN pg_stat_activity b ON b.pid = h.pid
		WHERE b.usename = $1 AND h.pid = ANY (pg_blocking_pids(w.pid))
			AND h.locktype = w.locktype AND h.database IS NOT DISTINCT FROM w.database
			AND h.relation IS NOT DISTINCT FROM w.relation AND h.page IS NOT DISTINCT FROM w.page
			AND h.tuple IS NOT DISTINCT FROM w.tuple AND h.virtualxid IS NOT DISTINCT FROM w.virtualxid
			AND h.transactionid IS NOT DISTINCT FROM w.transactionid AND h.classid IS NOT DISTINCT FROM w.classid
			AND h.objid IS NOT DISTINCT FROM w.objid AND h.objsubid IS NOT DISTINCT FROM w.objsubid)`

// watch samples the pools, the horizon and the lock waits every second
// until ctx ends.
func (s *chaosStalls) watch(ctx context.Context, r *chaosRun) {
	defer close(s.done)
	var bound, logged time.Duration
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Second)
		now := time.Now()
		b, load := stallAfter()
		bound, s.maxBound = b, max(s.maxBound, b)
		if (logged == 0 && b != chaosStallAfter) || (logged != 0 && (b-logged).Abs() >= 5*time.Second) {
			r.t.Logf("%5.1fs stall bound %s (load %.1f on %d CPUs)", r.elapsed(), b, load, runtime.NumCPU())
			logged = b
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rows, err := s.db.Query(qctx, sqlPoolStalls, bound.String())
		stalled := map[string]bool{}
		if err == nil {
			var pool string
			var st bool
			_, err = pgx.ForEachRow(rows, []any{&pool, &st}, func() error { stalled[pool] = st; return nil })
		}
		var h, last int64
		if err == nil {
			err = s.db.QueryRow(qctx, `SELECT horizon, (SELECT coalesce(max(global_sequence), 0) FROM riverbus_event) FROM riverbus_horizon`).Scan(&h, &last)
		}
		var waiters []string
		if err == nil {
			rows, err = s.db.Query(qctx, sqlNeighbourWaiters, chaosNeighbourRole)
			if err == nil {
				waiters, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
		}
		cancel()
		if err != nil {
			continue // the database restarting: the crash is excluded anyway
		}
		for _, w := range waiters {
			if !s.lockWaits[w] {
				s.lockWaits[w] = true
				r.t.Logf("%5.1fs LOCK WAIT: session %s waits for a lock the neighbour holds", r.elapsed(), w)
			}
		}
		for pool, st := range stalled {
			if !st || s.quiet(pool, now) {
				if !s.since[pool].IsZero() {
					r.t.Logf("%5.1fs pool %s works again after a stall of at least %s", r.elapsed(), pool, now.Sub(s.since[pool]).Round(time.Second)+bound)
				}
				s.since[pool] = time.Time{}
				continue
			}
			if s.since[pool].IsZero() {
				s.since[pool] = now
				s.stalledPools[pool] = true
				s.episodes = append(s.episodes, fmt.Sprintf("%5.1fs pool %s: jobs due for %s, none started or finished", r.elapsed(), pool, bound))
				r.t.Logf("%5.1fs STALL: pool %s has had jobs due for %s and started or finished none", r.elapsed(), pool, bound)
				s.describeStall(ctx, r, pool)
			}
		}
		switch {
		case s.horizonQuiet(now) || h != s.horizonLast || last <= h:
			s.horizonSince, s.horizonLast = now, h
		case now.Sub(s.horizonSince) > bound:
			s.horizonStalls++
			s.episodes = append(s.episodes, fmt.Sprintf("%5.1fs horizon: at %d for %s with committed events up to %d", r.elapsed(), h, bound, last))
			r.t.Logf("%5.1fs STALL: the horizon has been at %d for %s, committed events up to %d", r.elapsed(), h, bound, last)
			// A stalled horizon stops every pool.
			for pool := range stalled {
				s.stalledPools[pool] = true
			}
			s.horizonSince = now // one episode per bound of standstill
		}
	}
}

// waits lists the sessions seen waiting for the neighbour, sorted.
func (s *chaosStalls) waits() []string { return slices.Sorted(maps.Keys(s.lockWaits)) }

// stalledNames lists the pools that stalled while watched, sorted.
func (s *chaosStalls) stalledNames() []string { return slices.Sorted(maps.Keys(s.stalledPools)) }

// sqlPoolSessions lists what the sessions of a pool's worker processes
// ($1: their application_name prefix) are doing.
const sqlPoolSessions = `SELECT pid || ' ' || application_name || ' ' || coalesce(state, '') || ' ' ||
	coalesce(wait_event_type || ':' || wait_event, '-') || ' for ' || coalesce(round(extract(epoch FROM now() - state_change))::text, '?') || 's: ' ||
	left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), 120)
FROM pg_stat_activity WHERE application_name LIKE $1 ORDER BY application_name, pid`

// describeStall logs what a stalled pool's worker sessions are doing, so a
// stall names its cause. With RIVERBUS_CHAOS_DEBUG it also writes every
// goroutine's stack to a file in RIVERBUS_CHAOS_DEBUG_DIR (else the system's
// temporary directory): the test process's, for a pool it works itself; the
// worker process's, which it ends with SIGABRT for that (the run restarts it
// as after a kill).
func (s *chaosStalls) describeStall(ctx context.Context, r *chaosRun, pool string) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := s.db.Query(qctx, sqlPoolSessions, "chaos-"+pool+"-%")
	var sessions []string
	if err == nil {
		sessions, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		r.t.Logf("pool %s: its sessions could not be read: %v", pool, err)
		return
	}
	r.t.Logf("pool %s: %d sessions of its worker process:\n\t%s", pool, len(sessions), strings.Join(sessions, "\n\t"))
	var jobs string
	err = s.db.QueryRow(qctx, `SELECT coalesce(string_agg(state || ' ' || n || ' (oldest attempt ' || coalesce(age::text, '-') || ', by ' || coalesce(by, '-') || ')', '; '), 'none')
		|| ' | queue paused_at ' || coalesce((SELECT q.paused_at::text FROM river_queue q JOIN riverbus_pool p ON p.queue = q.name WHERE p.name = $1), '-')
		FROM (SELECT state::text, count(*) n, round(extract(epoch FROM now() - min(attempted_at)))::int age, string_agg(DISTINCT attempted_by[array_length(attempted_by, 1)], ',') by
			FROM river_job WHERE kind = $1 AND state IN ('available', 'running', 'retryable', 'scheduled') GROUP BY state) x`, pool).Scan(&jobs)
	r.t.Logf("pool %s: jobs %s (err %v)", pool, jobs, err)
	if os.Getenv("RIVERBUS_CHAOS_DEBUG") == "" {
		return
	}
	if !slices.Contains(chaosProcPools, pool) {
		var b bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
		f := filepath.Join(cmp.Or(os.Getenv("RIVERBUS_CHAOS_DEBUG_DIR"), os.TempDir()), fmt.Sprintf("stall-%s-%.0f.txt", pool, r.elapsed()))
		_ = os.WriteFile(f, b.Bytes(), 0o644)
		r.t.Logf("pool %s: the test process's goroutines are in %s", pool, f)
		return
	}
	s.mu.Lock()
	p := s.procOf[pool]
	s.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.done:
		r.t.Logf("pool %s: its worker process (pid %d) has exited (%v); output:\n%s", pool, p.cmd.Process.Pid, p.err, p.out.String())
		return
	default:
	}
	// Where its threads wait in the kernel (a full pipe, a futex, a
	// socket), in case it cannot print its goroutines.
	var threads []string
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", p.cmd.Process.Pid))
	for _, task := range tasks {
		wchan, _ := os.ReadFile(filepath.Join(task, "wchan"))
		stat, _ := os.ReadFile(filepath.Join(task, "stat"))
		threads = append(threads, filepath.Base(task)+" "+string(wchan)+" "+strings.TrimSpace(string(stat)))
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	r.t.Logf("pool %s: its worker's (pid %d) threads:\n\t%s\n%s", pool, p.cmd.Process.Pid, strings.Join(threads, "\n\t"), status)
	_ = p.cmd.Process.Signal(syscall.SIGABRT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	out := p.out.String()
	if i := strings.Index(out, "SIGABRT"); i >= 0 {
		out = out[i:]
	}
	f := filepath.Join(cmp.Or(os.Getenv("RIVERBUS_CHAOS_DEBUG_DIR"), os.TempDir()), fmt.Sprintf("stall-%s-%.0f.txt", pool, r.elapsed()))
	_ = os.WriteFile(f, []byte(out), 0o644)
	r.t.Logf("pool %s: its worker process's goroutines are in %s; the run restarts it", pool, f)
}
