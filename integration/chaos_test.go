package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

// chaosDurationFlag overrides RIVERBUS_CHAOS_DURATION:
// go test ./integration -run TestChaos -args -chaos-duration 2m
var chaosDurationFlag = flag.Duration("chaos-duration", 0,
	"TestChaos: how long the writers run (0: $RIVERBUS_CHAOS_DURATION, else 30s)")

// Load and chaos settings of TestChaos.
const (
	chaosWriters      = 32                     // writer goroutines, one event per transaction
	chaosMaxHold      = 200 * time.Millisecond // a writer holds each transaction up to this long: ~300 transactions/s in all
	chaosKeys         = 200                    // event keys the writers take turns with: the ordered pool's parallelism
	chaosEventsPerTx  = 6                      // each writer transaction appends 1 to this many events
	chaosRollbacks    = 10                     // percent of writer transactions rolled back
	chaosLongWriters  = 3                      // goroutines that run transactions outliving the gap timeout
	chaosGapTimeout   = 2 * time.Second        // RIVERBUS_GAP_TIMEOUT of the fan-out processes
	chaosStuckAfter   = 45 * time.Second       // a job running this long in the final drain is stuck (see chaosRescueAfter)
	chaosMinDuration  = 20 * time.Second
	chaosDefaultDur   = 30 * time.Second
	chaosDrainTimeout = 120 * time.Second // plus half the duration
	// chaosMaxBacklog: writers pause while more jobs than this are
	// unfinished or still to be fanned out (per pool, sequences above its
	// cursor), so the final drain stays short however long the run and
	// however busy the machine.
	chaosMaxBacklog = 10000
)

// The pools worked by killed processes, one process each.
const (
	chaosProjection = "projection" // exactly-once projection (testworker)
	chaosHooks      = "hooks"      // webhook delivery, at least once (riverbus work --webhook)
	chaosOrdered    = "ordered"    // key-ordered, 5% transient failures (testworker)
)

var chaosProcPools = []string{chaosProjection, chaosHooks, chaosOrdered}

// chaosOwnMachine reports whether the chaos run was asked for by itself
// (make chaos sets its duration) rather than run as part of the whole
// suite, beside every other package's tests.
func chaosOwnMachine() bool {
	return *chaosDurationFlag > 0 || os.Getenv("RIVERBUS_CHAOS_DURATION") != ""
}

func chaosDuration(t *testing.T) time.Duration {
	t.Helper()
	d := chaosDefaultDur
	if *chaosDurationFlag > 0 {
		d = *chaosDurationFlag
	} else if s := os.Getenv("RIVERBUS_CHAOS_DURATION"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err, "RIVERBUS_CHAOS_DURATION")
	}
	require.GreaterOrEqual(t, d, chaosMinDuration, "the chaos run needs time to kill every kind of process")
	return d
}

// The chaos run ("make chaos" runs it for 5 minutes, make test for 30 s;
// RIVERBUS_CHAOS_DURATION or -chaos-duration sets how long the writers run):
// 32 writers append with random holds and 10% rollbacks, and a few
// transactions outlive the gap timeout, while two fan-out processes and one
// worker process per pool — exactly-once projection, webhook delivery
// (at-least-once), key-ordered — are killed -9 at random and restarted, and
// PostgreSQL crashes once (immediate shutdown, then recovery). Meanwhile a
// login with no riverbus grant sprays forged River control messages, holds
// parse-time locks and advisory keys, and an application login appends
// through a temporary sequence and appends big events (chaosNeighbour); a
// `riverbus backfill` of an application's rows runs beside the traffic,
// killed -9 once and run again (chaosBackfill); no pool may stop for over
// 10 s (chaosStalls). Then every committed event
// must have exactly one job per pool, every job must be finished and none
// cancelled, the projection must be exact, every key's successful runs in
// order, and late events delivered. It prints one line of figures
// ("chaos: ..."). Writers pause while the backlog is over chaosMaxBacklog, so
// the drain stays short on a slow or busy machine. RIVERBUS_CHAOS_DEBUG=1
// logs every 2 s what the fan-out sessions are doing, and at a stall the
// goroutines of whatever works the pool (describeStall).
//
// River rescues the jobs of a killed worker only after RescueStuckJobsAfter
// (two minutes for riverbus work) and on its elected leader's 30 s rescuer
// interval, whichever process that is — too slow for this run. The test
// stands in for River's rescuer: it kills a pool's only worker process, waits
// until the server has ended that process's sessions (a statement running
// when the process died, such as a fetch, still commits), and then every job
// of the pool still `running` belonged to a dead process and is made
// available again (what River's rescuer does, minus the backoff). In the
// final drain a job still running after 20 s (its process lost the
// completion to the database restart) gets the same treatment.
//
// The run goes through its phases in order; each is a method of chaosRun
// below, documented with what it does and what it checks.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run: several processes, kills and a PostgreSQL crash")
	}
	t.Parallel()
	r := setUpChaos(t)
	r.startProcesses()
	r.startStallWatch()
	r.startTraffic()
	r.disrupt()
	r.stopTraffic()
	r.drain()
	r.stalls.stopStallWatch()
	r.neighbour.stopNeighbour()
	r.stopProcesses()
	res := r.collect()
	r.report(res)
	r.verify(res)
}

// chaosRun is the state TestChaos's phases share. Only the test's goroutine
// touches it, except where a field says otherwise.
type chaosRun struct {
	t     *testing.T
	ctx   context.Context
	dur   time.Duration // how long the writers run
	began time.Time

	srv   *pgserver.Server
	dbURL string
	db    *pgxpool.Pool // the test's own reads, rescues and operator actions
	// wdb is the writers' pool: its connections wait while throttled.
	wdb       *pgxpool.Pool
	throttled atomic.Bool // set by the back-pressure goroutine

	extra     *chaosPools     // pools worked by the test's own River client
	actions   *chaosActions   // poison events, failing events, UI retries, 2PC, a jump
	neighbour *chaosNeighbour // a login with no grants, and an application login's moves
	backfill  *chaosBackfill  // existing rows turned into events beside the traffic
	stalls    *chaosStalls    // pools and horizon stopped for a while
	hooks     *hookReceiver
	hookURL   string
	procs     []*chaosProc

	// Set by startTraffic.
	wctx             context.Context // ends when the writers must stop
	load             *writerLoad
	longStarted      int // long transactions that reached COMMIT; under load.mu
	writersDone      chan struct{}
	backpressureDone chan struct{}
	throttledFor     time.Duration // written by the back-pressure goroutine until backpressureDone

	// Disruptions, counted as they happen.
	kills      int // every kill -9, the drain's included
	chaosKills int // kill -9s while the writers ran
	exits      int // processes that exited by themselves
	rescued    int // jobs the test made available again (stand-in for River's rescuer)
	pgCrashes  int

	// Set by stopTraffic.
	committed map[int64]bool // every committed sequence

	// Set by drain.
	last       map[string]chaosPoolState // each pool's state when the drain ended
	notDrained []string                  // pools not drained by the deadline
}

// chaosPoolState is one pool's jobs as the drain sees them.
type chaosPoolState struct {
	cursor                      int64
	seqs, unfinished, discarded int
	oldestRunning               float64 // seconds
}

// elapsed is the seconds since the run began, for the log.
func (r *chaosRun) elapsed() float64 { return time.Since(r.began).Seconds() }

// chaosAppName is the application_name of a process's connections: its slot and
// generation (pgx reads PGAPPNAME), so the test can tell when a killed
// process's last statement has ended.
func chaosAppName(slot string, gen int) string { return fmt.Sprintf("chaos-%s-%d", slot, gen) }

// setUpChaos starts a PostgreSQL server of the run's own (it is crashed
// later) with a DBA's idle_in_transaction_session_timeout of 5 s, the
// writers' connection pool with back-pressure, the three process-worked
// pools, the pools worked in the test (chaosPools), River UI for the
// operator actions (chaosActions), a trigger that records every sequence the
// horizon marks late, and the webhook receiver.
func setUpChaos(t *testing.T) *chaosRun {
	r := &chaosRun{t: t, ctx: context.Background(), dur: chaosDuration(t), began: time.Now()}
	ctx := r.ctx
	r.srv, r.dbURL = pgtest.NewServer(t)
	r.db = pgtest.Connect(t, r.dbURL)
	// A DBA's setting: sessions idle inside a transaction for 5 s are
	// ended. No riverbus transaction may depend on outliving it (the
	// application's long writers below opt out, as an application would).
	_, err := r.db.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L', current_database(), '5s');
	END $$`)
	require.NoError(t, err)
	wcfg, err := pgxpool.ParseConfig(r.dbURL)
	require.NoError(t, err)
	wcfg.MaxConns = chaosWriters + chaosLongWriters + 4 // every writer holds a connection through its transaction
	// Back-pressure: a writer waits for a connection while the backlog is
	// over chaosMaxBacklog.
	wcfg.PrepareConn = func(ctx context.Context, _ *pgx.Conn) (bool, error) {
		for r.throttled.Load() {
			select {
			case <-ctx.Done():
				return true, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		return true, nil
	}
	r.wdb, err = pgxpool.NewWithConfig(ctx, wcfg)
	require.NoError(t, err)
	t.Cleanup(r.wdb.Close)

	for _, p := range []bustype.PoolParams{{Name: chaosProjection}, {Name: chaosHooks}, {Name: chaosOrdered, Ordering: bustype.OrderingKey}} {
		_, _, err := createPool(ctx, r.db, p)
		require.NoError(t, err)
	}
	r.extra = startChaosPools(t, ctx, r.db)
	r.actions = startChaosActions(t, ctx, r.db)
	// Instrumentation: record every sequence the horizon marks late (the
	// fan-out retires riverbus_late rows once every pool has the event).
	_, err = r.db.Exec(ctx, `CREATE TABLE chaos_late (sequence bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE FUNCTION chaos_late_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO chaos_late (sequence) VALUES (NEW.sequence) ON CONFLICT DO NOTHING;
			RETURN NULL;
		END $$;
		CREATE TRIGGER chaos_late_record AFTER INSERT ON riverbus_late
			FOR EACH ROW EXECUTE FUNCTION chaos_late_record();`)
	require.NoError(t, err)
	r.hooks = &hookReceiver{bySeq: map[int64][]uuid.UUID{}}
	hookSrv := httptest.NewServer(r.hooks)
	t.Cleanup(hookSrv.Close)
	r.hookURL = hookSrv.URL + "/events"
	r.setUpBackfill()
	return r
}

// chaosRescueAfter is the RescueStuckJobsAfter of the test workers and of
// the test's own client in the chaos run: riverbus's default margin of a
// minute beyond the job's timeout (5 s here). A worker reads a big event's
// payload from the log before the job's timeout starts and gets half that
// margin for it (resolvePayloads, in package workers): 30 s, as in production.
// A shorter margin makes the run test something no deployment runs: eight
// 60 MiB reads at once on two cores, each given up at its bound and begun
// again, never finished. Jobs then end within 35 s, below chaosStuckAfter,
// where the test's stand-in rescuer takes over in the drain.
const chaosRescueAfter = 65 * time.Second

// startProcesses starts the five process slots — a worker process for each
// of the projection, ordered and hooks pools, and two fan-out processes —
// one at a time (the test workers create their tables on start), each
// waited for until it says it is working.
func (r *chaosRun) startProcesses() {
	t, dbURL := r.t, r.dbURL
	appEnv := func(slot string, gen int, env ...string) []string {
		return append([]string{"PGAPPNAME=" + chaosAppName(slot, gen)}, env...)
	}
	fanEnv := []string{"RIVERBUS_GAP_TIMEOUT=" + chaosGapTimeout.String(), "RIVERBUS_POLL_INTERVAL=200ms", "RIVERBUS_LOG_LEVEL=warn"}
	r.procs = []*chaosProc{
		{name: chaosProjection, pool: chaosProjection, ready: "ready", run: func(gen int) *proc {
			return start(t, dbURL, "testworker", appEnv(chaosProjection, gen), "-pool", chaosProjection, "-mode", "projection",
				"-id", fmt.Sprintf("projection-%d", gen), "-concurrency", "20", "-rescue-after", chaosRescueAfter.String())
		}},
		{name: chaosOrdered, pool: chaosOrdered, ready: "ready", run: func(gen int) *proc {
			return start(t, dbURL, "testworker", appEnv(chaosOrdered, gen), "-pool", chaosOrdered, "-mode", "ordered",
				"-id", fmt.Sprintf("ordered-%d", gen), "-fail-rate", "0.05", "-max-delay", "2ms", "-concurrency", "60",
				"-rescue-after", chaosRescueAfter.String())
		}},
		{name: chaosHooks, pool: chaosHooks, ready: "delivering pool hooks", run: func(gen int) *proc {
			return start(t, dbURL, "riverbus", appEnv(chaosHooks, gen, "RIVERBUS_LOG_LEVEL=error"),
				"work", "--pool", chaosHooks, "--webhook", r.hookURL, "--concurrency", "20")
		}},
		{name: "fanout1", run: func(gen int) *proc { return start(t, dbURL, "riverbus", appEnv("fanout1", gen, fanEnv...), "fanout") }},
		{name: "fanout2", run: func(gen int) *proc { return start(t, dbURL, "riverbus", appEnv("fanout2", gen, fanEnv...), "fanout") }},
	}
	for _, c := range r.procs {
		c.p = c.run(0)
		if c.ready != "" {
			c.p.waitOutput(c.ready, 30*time.Second)
		}
	}
}

// startTraffic starts, for the run's duration: the writers (chaosWriters
// goroutines, one to chaosEventsPerTx events per transaction, random holds,
// chaosRollbacks% rolled back), chaosLongWriters goroutines whose
// transactions outlive the gap timeout (late events), a two-phase-commit
// writer, the neighbour (until the drain ends) with the probes of its locks,
// the application login's temporary sequence and big events, the backfill
// (until it finishes), and the back-pressure goroutine that throttles the writers while the backlog is
// over chaosMaxBacklog.
func (r *chaosRun) startTraffic() {
	wctx, stopWriters := context.WithTimeout(r.ctx, r.dur)
	r.t.Cleanup(stopWriters)
	r.wctx = wctx
	r.load = startWriters(wctx, r.wdb, writerOpts{writers: chaosWriters, perWriter: 1 << 40, rollbackPercent: chaosRollbacks, maxHold: chaosMaxHold,
		eventsPerTx: chaosEventsPerTx, keys: chaosKeys})
	for g := range chaosLongWriters {
		r.load.wg.Add(1)
		go r.longWriter(g)
	}
	r.load.wg.Add(1)
	go r.actions.preparedWriter(wctx, r.wdb, &r.load.wg)
	r.startChaosNeighbour()
	r.load.wg.Add(3)
	go r.probeLocks()
	go r.tempSequence()
	go r.operatorPause()
	r.startBigEvents()
	r.load.wg.Add(1)
	go r.runBackfill()
	r.writersDone = make(chan struct{})
	go func() { r.load.wg.Wait(); close(r.writersDone) }()
	r.backpressureDone = make(chan struct{})
	go r.backpressure()
}

// longWriter runs long transactions until the writers stop: each holds its
// event past the gap timeout while the others commit higher sequences, so
// the horizon skips it and it commits late. Each gets a key of its own: a
// late event is by design delivered after its key's later events.
func (r *chaosRun) longWriter(g int) {
	load, wctx := r.load, r.wctx
	defer load.wg.Done()
	sleepCtx(wctx, time.Duration(rand.Int64N(int64(5*time.Second)))) // stagger the long writers
	for n := 0; wctx.Err() == nil; n++ {
		id := uuid.New()
		tx, err := r.wdb.Begin(wctx)
		if err != nil {
			sleepCtx(wctx, 100*time.Millisecond) // back off while the database is down
			continue
		}
		var seq int64
		// Outlive the DBA's idle_in_transaction_session_timeout on
		// purpose, as an application that needs to would.
		if _, err := tx.Exec(wctx, `SET LOCAL idle_in_transaction_session_timeout = 0`); err != nil {
			_ = tx.Rollback(context.Background())
			sleepCtx(wctx, 100*time.Millisecond) // back off while the database is down
			continue
		}
		if err := tx.QueryRow(wctx, `INSERT INTO riverbus_event (event_id, type, key, data) VALUES ($1, 'it.long', $2, '{}') RETURNING global_sequence`,
			id, fmt.Sprintf("long-%d-%d", g, n)).Scan(&seq); err != nil {
			_ = tx.Rollback(context.Background())
			sleepCtx(wctx, 100*time.Millisecond) // back off while the database is down
			continue
		}
		// Time passing is the point: the transaction stays open past the
		// gap timeout, even when the writers are told to stop meanwhile.
		time.Sleep(chaosGapTimeout + time.Second + time.Duration(rand.Int64N(int64(2*time.Second))))
		err = tx.Commit(context.Background())
		load.mu.Lock()
		r.longStarted++
		if err == nil {
			load.committed[seq] = true
		} else {
			load.ambiguous = append(load.ambiguous, id)
		}
		load.mu.Unlock()
		sleepCtx(wctx, 2*time.Second+time.Duration(rand.Int64N(int64(4*time.Second)))) // pace: a few long transactions, not a stream
	}
}

// backpressure measures the backlog (unfinished jobs plus, per pool, the
// sequences above its cursor) every 500 ms until the writers are done, and
// throttles the writers while it is over chaosMaxBacklog, adding up how long
// they were throttled.
func (r *chaosRun) backpressure() {
	defer close(r.backpressureDone)
	defer r.throttled.Store(false)
	for {
		select {
		case <-r.writersDone:
			return
		case <-time.After(500 * time.Millisecond):
		}
		var backlog int
		qctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		err := r.db.QueryRow(qctx, `SELECT (SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled'))
			+ (SELECT coalesce(sum(greatest((SELECT max(global_sequence) FROM riverbus_event) - cursor_seq, 0)), 0) FROM riverbus_pool)::bigint`).Scan(&backlog)
		cancel()
		if err != nil {
			continue // the database restarting: keep the current state
		}
		if r.throttled.Load() {
			r.throttledFor += 500 * time.Millisecond
		}
		r.throttled.Store(backlog > chaosMaxBacklog)
	}
}

// disrupt is the chaos itself, until the writers are done: a kill -9 of a
// process every 1-4 s (the first rounds go through every process once), one
// PostgreSQL crash in the middle third, an operator action every second
// (poison and always-failing events, River UI retries of dead letters), two
// pools created from now at a quarter of the run and reset into a
// transaction a quarter later, and one sequence jump at three fifths. A
// process that exits by itself is restarted. The invariants are checked
// after the drain; here only an operator action that keeps failing after
// 30 s of retries fails the test.
func (r *chaosRun) disrupt() {
	t := r.t
	restart := time.After(r.dur/3 + time.Duration(rand.Int64N(int64(r.dur/3))))
	order := rand.Perm(len(r.procs))
	nextKill := func() <-chan time.Time {
		return time.After(time.Second + time.Duration(rand.Int64N(int64(3*time.Second))))
	}
	killTimer := nextKill()
	createPools := time.After(r.dur / 4)
	var resetPool <-chan time.Time
	actTick := time.NewTicker(time.Second)
	defer actTick.Stop()
	actN := 0
	jumpAt := time.After(r.dur * 3 / 5)
	progressEvery := 10 * time.Second
	if os.Getenv("RIVERBUS_CHAOS_DEBUG") != "" {
		progressEvery = 2 * time.Second
	}
	progressTick := time.NewTicker(progressEvery)
	defer progressTick.Stop()
	jump := func() {
		if err := retryFor(30*time.Second, func() error { return r.actions.jump(r.ctx) }); err != nil {
			t.Errorf("sequence jump: %v", err)
		}
		t.Logf("%5.1fs sequence jumped ahead by 1e12", r.elapsed())
	}
	create := func() {
		if err := retryFor(30*time.Second, func() error { return r.extra.createMidStream(r.ctx, r.db) }); err != nil {
			t.Errorf("create pools mid-stream: %v", err)
		}
		t.Logf("%5.1fs created pools %s (from %d) and %s (from %d)", r.elapsed(),
			chaosLateOrdered, r.extra.lateOrderedStart, chaosLateGrouped, r.extra.lateGroupedStart)
		resetPool = time.After(r.dur / 4)
	}
	reset := func() {
		if err := retryFor(30*time.Second, func() error { return r.extra.reset(r.ctx, r.db) }); err != nil {
			// A short run on a loaded machine may commit no transaction of
			// several events after the late pools' start (the writers wait
			// on the backlog, PostgreSQL restarts): only longer runs
			// require the reset, as they require a late event.
			if r.dur < time.Minute {
				t.Logf("%5.1fs no mid-stream reset in this short run: %v", r.elapsed(), err)
				return
			}
			t.Errorf("reset pool mid-stream: %v", err)
		}
		t.Logf("%5.1fs reset pools %s and %s to %d (inside a transaction)", r.elapsed(), chaosLateGrouped, chaosLateOrdered, r.extra.resetTo)
	}
	for {
		select {
		case <-r.writersDone:
			// A loop that fell behind may find the writers done and a
			// one-shot disruption due at once, and select either: the
			// due ones still happen (none is due after the writers).
			for due := true; due; {
				select {
				case <-restart:
					r.crashPostgres()
				case <-jumpAt:
					jump()
				case <-createPools:
					create()
				case <-resetPool:
					reset()
				default:
					due = false
				}
			}
			// Likewise every process is killed once: on a loaded machine
			// a short run's kills, 1-4 s apart and behind the operator
			// actions, may not reach all five.
			for _, c := range r.procs {
				if c.kills == 0 {
					r.kill(c, "chaos: every process at least once")
				}
			}
			r.chaosKills = r.kills
			return
		case <-restart:
			r.crashPostgres()
		case <-progressTick.C:
			r.logProgress()
		case <-actTick.C:
			actCtx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			r.actions.act(actCtx, actN)
			cancel()
			actN++
		case <-jumpAt:
			jump()
		case <-createPools:
			create()
		case <-resetPool:
			reset()
		case <-killTimer:
			i := rand.IntN(len(r.procs))
			if r.kills < len(order) {
				i = order[r.kills]
			}
			r.kill(r.procs[i], "chaos")
			killTimer = nextKill()
		}
		r.supervise()
	}
}

// crashPostgres crashes the server (immediate shutdown) and starts it
// again. A crash, not a clean restart: the fan-out commits rounds and
// batches asynchronously, so the last of them may be lost here, and nothing
// that depended on them may be.
func (r *chaosRun) crashPostgres() {
	r.t.Logf("%5.1fs crashing PostgreSQL (immediate shutdown) and starting it again", r.elapsed())
	r.stalls.crash(false)
	require.NoError(r.t, r.srv.Crash(r.ctx))
	r.stalls.crash(true)
	r.pgCrashes++
	r.t.Logf("%5.1fs PostgreSQL is back", r.elapsed())
}

// kill kill -9s a slot's process, rescues its pool's running jobs if it is
// a worker, and starts the slot's next generation.
func (r *chaosRun) kill(c *chaosProc, why string) {
	c.p.kill9()
	if c.pool != "" {
		r.rescue(c)
	}
	r.kills++
	c.kills++
	c.gen++
	c.p = c.run(c.gen)
	r.stalls.started(c)
	r.t.Logf("%5.1fs kill -9 %s (%s)", r.elapsed(), c.label(), why)
}

// supervise restarts every process that exited by itself (logging the end
// of its output), rescuing its pool's running jobs first.
func (r *chaosRun) supervise() {
	for _, c := range r.procs {
		select {
		case <-c.p.done:
			out := c.p.out.String()
			if len(out) > 2000 {
				out = out[len(out)-2000:]
			}
			r.t.Logf("%5.1fs %s exited by itself (%v), restarting it; output ends:\n%s", r.elapsed(), c.label(), c.p.err, out)
			r.exits++
			if c.pool != "" {
				r.rescue(c)
			}
			c.gen++
			c.p = c.run(c.gen)
			r.stalls.started(c)
		default:
		}
	}
}

// rescue makes the pool's running jobs available: called only once the
// pool's one worker process is dead, it waits (up to 30 s) until that
// process's last statement has ended (a fetch running in the server when the
// process died still commits), so each job still running belonged to a dead
// process.
func (r *chaosRun) rescue(c *chaosProc) {
	pool := c.pool
	var left int
	if err := retryFor(30*time.Second, func() error {
		if err := r.db.QueryRow(r.ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, chaosAppName(c.name, c.gen)).Scan(&left); err != nil {
			return err
		}
		if left > 0 {
			return fmt.Errorf("%d sessions of the killed %s worker remain", left, pool)
		}
		return nil
	}); err != nil {
		r.t.Logf("rescue: %v; rescuing anyway", err)
	}
	var n int64
	require.NoError(r.t, retryFor(60*time.Second, func() error {
		tag, err := r.db.Exec(r.ctx, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE kind = $1 AND state = 'running'`, pool)
		n = tag.RowsAffected()
		return err
	}), "rescue the running jobs of pool %s", pool)
	r.rescued += int(n)
}

// logProgress logs the horizon, the last sequence and each pool's finished
// jobs; with RIVERBUS_CHAOS_DEBUG, also what the fan-out sessions are doing.
func (r *chaosRun) logProgress() {
	t, ctx, db := r.t, r.ctx, r.db
	var h, last, gaps, watching int64
	_ = db.QueryRow(ctx, `SELECT horizon, (SELECT coalesce(max(global_sequence), 0) FROM riverbus_event),
		(SELECT count(*) FROM riverbus_gap), (SELECT count(*) FROM riverbus_skipped) FROM riverbus_horizon`).Scan(&h, &last, &gaps, &watching)
	if os.Getenv("RIVERBUS_CHAOS_DEBUG") != "" {
		rows, err := db.Query(ctx, `SELECT a.application_name, a.pid, a.state, coalesce(a.wait_event_type || ':' || a.wait_event, ''),
			round(extract(epoch FROM now() - a.query_start)::numeric, 1)::text, left(a.query, 60),
			coalesce((SELECT string_agg(b.application_name || '/' || b.pid || '/' || b.state, ',') FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(a.pid))), '')
			FROM pg_stat_activity a WHERE a.application_name LIKE 'chaos-fanout%' AND a.state <> 'idle' ORDER BY 1`)
		if err == nil {
			var a, st, w, age, q, blk string
			var pid int
			_, _ = pgx.ForEachRow(rows, []any{&a, &pid, &st, &w, &age, &q, &blk}, func() error {
				t.Logf("   %s[%d] %s %s %ss %q blocked by [%s]", a, pid, st, w, age, q, blk)
				return nil
			})
		}
		var sk, pl int
		_ = db.QueryRow(ctx, `SELECT (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late), (SELECT count(*) FROM riverbus_pool_late)`).Scan(&sk, &pl)
		t.Logf("   riverbus_skipped/late %d rows, riverbus_pool_late %d rows", sk, pl)
	}
	rows, err := db.Query(ctx, `SELECT kind, count(*) FILTER (WHERE state = 'completed'), count(*) FROM river_job GROUP BY kind ORDER BY kind`)
	if err != nil {
		return
	}
	line := fmt.Sprintf("%5.1fs last %d horizon %d (gaps %d, watching %d)", r.elapsed(), last, h, gaps, watching)
	var kind string
	var done, all int
	_, _ = pgx.ForEachRow(rows, []any{&kind, &done, &all}, func() error {
		line += fmt.Sprintf(" | %s %d/%d done", kind, done, all)
		return nil
	})
	t.Log(line)
}

// stopTraffic waits for the writers to stop (their duration is over) and the
// back-pressure goroutine to end, ends every prepared transaction left, and
// collects the committed sequences, ambiguous commits resolved against the
// database. It checks that the database holds exactly the events the
// writers and the actions committed.
func (r *chaosRun) stopTraffic() {
	<-r.writersDone
	<-r.backpressureDone
	r.actions.settle(r.t, r.ctx, r.load.committed)
	r.neighbour.settle(r.t, r.load.committed)
	r.backfill.settle(r.t, r, r.load.committed)
	r.committed = r.load.wait(r.t, r.db)
	r.t.Logf("%5.1fs writers done: %d events committed, %d rolled back, %d long transactions; draining",
		r.elapsed(), len(r.committed), r.load.rolledBack, r.longStarted)
}

// allPools is every pool of the run: the three process-worked ones and
// those worked by the test's own client.
func (r *chaosRun) allPools() []string {
	return append(slices.Clone(chaosProcPools), r.extra.pools()...)
}

// drain waits, within chaosDrainTimeout plus half the duration, until every
// pool's cursor is past the last committed event, no gap is open and no
// skipped sequence is watched or awaiting a pool (so no late event is still
// to come), and every job is finished. Meanwhile it restarts processes that
// exit and stands in for River's rescuer: a job running longer than
// chaosStuckAfter lost its completion to the crash. Pools not drained by the
// deadline are counted as stalled (and their unfinished jobs logged).
func (r *chaosRun) drain() {
	t, ctx, db := r.t, r.ctx, r.db
	var lastCommitted int64
	for seq := range r.committed {
		lastCommitted = max(lastCommitted, seq)
	}
	drainDeadline := time.Now().Add(chaosDrainTimeout + r.dur/2)
	allPools := r.allPools()
	for {
		r.supervise()
		st := map[string]chaosPoolState{}
		var gapsOrSkipped int
		err := retryFor(5*time.Second, func() error {
			for _, pool := range allPools {
				var s chaosPoolState
				if err := db.QueryRow(ctx, `SELECT (SELECT cursor_seq FROM riverbus_pool WHERE name = $1),
					count(DISTINCT (args->>'global_sequence')::bigint),
					count(*) FILTER (WHERE state NOT IN ('completed', 'discarded', 'cancelled')),
					count(*) FILTER (WHERE state IN ('discarded', 'cancelled')),
					coalesce(extract(epoch FROM now() - min(attempted_at) FILTER (WHERE state = 'running')), 0)::float8
					FROM river_job WHERE kind = $1`, pool).Scan(&s.cursor, &s.seqs, &s.unfinished, &s.discarded, &s.oldestRunning); err != nil {
					return err
				}
				st[pool] = s
			}
			return db.QueryRow(ctx, `SELECT (SELECT count(*) FROM riverbus_gap) + (SELECT count(*) FROM riverbus_skipped) + (SELECT count(*) FROM riverbus_late)`).Scan(&gapsOrSkipped)
		})
		require.NoError(t, err)
		r.last = st
		drained := gapsOrSkipped == 0
		for _, pool := range allPools {
			s := st[pool]
			if s.cursor < lastCommitted || s.unfinished > 0 {
				drained = false
			}
			if s.oldestRunning > chaosStuckAfter.Seconds() {
				r.rescueStuck(pool, s.oldestRunning)
			}
		}
		if drained {
			break
		}
		if time.Now().After(drainDeadline) {
			for _, pool := range allPools {
				if s := st[pool]; s.cursor < lastCommitted || s.unfinished > 0 {
					r.notDrained = append(r.notDrained, pool)
					logUnfinished(t, ctx, db, pool)
				}
			}
			t.Errorf("not drained after %s: %+v, %d gaps or skipped sequences (want cursors at %d, none unfinished)",
				chaosDrainTimeout+r.dur/2, st, gapsOrSkipped, lastCommitted)
			break
		}
		time.Sleep(500 * time.Millisecond) // poll interval of this wait on a condition with a deadline
	}
	t.Logf("%5.1fs drained: %+v", r.elapsed(), r.last)
}

// stopProcesses stops every process (SIGTERM; each must exit cleanly).
func (r *chaosRun) stopProcesses() {
	for _, c := range r.procs {
		c.p.stop()
	}
}

// stalledPools lists the pools that stalled: not drained by the deadline,
// or stopped for more than chaosStallAfter while the run went on (a
// stalled horizon stops them all).
func (r *chaosRun) stalledPools() []string {
	out := r.stalls.stalledNames()
	for _, pool := range r.notDrained {
		if !slices.Contains(out, pool) {
			out = append(out, pool)
		}
	}
	return out
}

// rescueStuck handles a pool job running for longer than chaosStuckAfter in
// the drain. In a pool of the test's own client, whose handlers return at
// once, the job lost its completion to the PostgreSQL crash: it is made
// available again. In a process-worked pool the process is killed, which
// rescues its running jobs.
func (r *chaosRun) rescueStuck(pool string, oldestRunning float64) {
	if !slices.Contains(chaosProcPools, pool) {
		tag, err := r.db.Exec(r.ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
			WHERE kind = $1 AND state = 'running' AND attempted_at < now() - $2::interval`, pool, chaosStuckAfter.String())
		if err == nil {
			r.rescued += int(tag.RowsAffected())
		}
		return
	}
	for _, c := range r.procs {
		if c.pool == pool {
			r.kill(c, fmt.Sprintf("stand-in for River's rescuer: a job running for %.0fs", oldestRunning))
		}
	}
}

// hookReceiver is the endpoint of the "hooks" pool's webhook worker: it
// records every delivery (event id by sequence) and answers 200.
type hookReceiver struct {
	mu         sync.Mutex
	bySeq      map[int64][]uuid.UUID
	deliveries int
	bad        []string // requests that were not a well-formed delivery
	// cut counts requests whose body ended early: the webhook worker was
	// killed (-9) mid-transfer, which a big event's body makes likely. Not
	// a delivery and not malformed: the job is rescued and sent again
	// whole, which NothingLost checks.
	cut int
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A real endpoint takes a few milliseconds: deliveries are in flight
	// long enough for the neighbour's forged cancels to find them.
	time.Sleep(rand.N(10 * time.Millisecond))
	body, err := io.ReadAll(r.Body)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		h.mu.Lock()
		h.cut++
		h.mu.Unlock()
		return
	}
	var a workers.Args
	if err == nil {
		err = json.Unmarshal(body, &a)
	}
	if err == nil && (r.Header.Get(webhook.HeaderID) != a.EventID.String() ||
		r.Header.Get(webhook.HeaderSequence) != strconv.FormatInt(a.GlobalSequence, 10)) {
		err = fmt.Errorf("headers %s=%q %s=%q do not match the body (%s, %d)", webhook.HeaderID, r.Header.Get(webhook.HeaderID),
			webhook.HeaderSequence, r.Header.Get(webhook.HeaderSequence), a.EventID, a.GlobalSequence)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.bad = append(h.bad, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.deliveries++
	h.bySeq[a.GlobalSequence] = append(h.bySeq[a.GlobalSequence], a.EventID)
}

// hookDeliveries is a copy of what a hookReceiver recorded.
type hookDeliveries struct {
	bySeq      map[int64][]uuid.UUID
	deliveries int
	bad        []string
	cut        int
}

// snapshot copies what h recorded so far.
func (h *hookReceiver) snapshot() hookDeliveries {
	h.mu.Lock()
	defer h.mu.Unlock()
	bySeq := make(map[int64][]uuid.UUID, len(h.bySeq))
	for seq, ids := range h.bySeq {
		bySeq[seq] = slices.Clone(ids)
	}
	return hookDeliveries{bySeq: bySeq, deliveries: h.deliveries, bad: slices.Clone(h.bad), cut: h.cut}
}

// chaosProc is one slot of the process set: whenever its process is killed
// (or exits) a new one takes its place.
type chaosProc struct {
	name  string
	pool  string // the pool a worker process works; "" for a fan-out
	ready string // what a worker process prints once it works its pool
	run   func(gen int) *proc
	p     *proc
	gen   int
	kills int
}

func (c *chaosProc) label() string {
	if c.pool == "" {
		return c.name
	}
	return c.pool + " worker"
}

// retryFor retries f until it succeeds or d has passed: a PostgreSQL
// restart leaves dead connections in a pool.
func retryFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // poll interval of this wait with a deadline
	}
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
