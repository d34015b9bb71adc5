package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

const (
	latencyDuration    = 10 * time.Second
	latencyDurationMin = 500 * time.Millisecond
	// latencyAppenders is how many goroutines append (or insert) at once,
	// so that a slow commit does not hold back the ones due after it, and
	// the size of their connection pool. The load is open loop: with 8, a
	// side whose transactions took more than 8 ms (a loaded machine, commits
	// queued behind each other's NOTIFY) fell short of the offered rate
	// whatever the database could take, which measured the harness.
	latencyAppenders = 32
	// latencyWorkers is the queue's MaxWorkers.
	latencyWorkers = 100
	warmupEvents   = 20
	// loadRate is the background load of latency-200-loaded, per second:
	// events appended for another pool (riverbus), jobs inserted into
	// another queue (raw River); both sides' workers work them.
	loadRate = 1000
	// loadKind is the other pool's name, job kind and queue.
	loadKind = "bench_load"
	// loadTag tags the background events; the measured pool takes
	// eventTag only.
	loadTag = "tenant=load"
)

// Steps of the way from commit to handler (latencySample.Hops).
const (
	hopRound   = "round"   // a horizon round that passed the event committed
	hopBatch   = "batch"   // the pool batch that inserted its job committed
	hopFetched = "fetched" // River fetched the job (its attempted_at)
)

// latencySample is one run of one side.
type latencySample struct {
	P50, P95, P99 float64 // commit → handler start, milliseconds
	// PickupP50, PickupP99: job created_at (the insert) → handler start,
	// milliseconds: River's share of the latency.
	PickupP50, PickupP99 float64
	Rate                 float64 // achieved per second
	Events               int     // how many were measured
	// Hops maps each step of the way (hopRound …) to commit → that
	// step, p50 and p99 in milliseconds, over the measured events. Raw
	// River has only hopFetched.
	Hops map[string][2]float64
	// LoadRate is the background load achieved, per second (0: none).
	LoadRate float64
	// Rounds counts the horizon rounds of the run (riverbus), Holding those
	// that waited at a gap; RoundP50 and RoundP99 are how long one took
	// (ms). Batches counts the measured pool's batches that inserted jobs.
	Rounds, Holding, Batches int
	RoundP50, RoundP99       float64
	// DBPerEvent is the database's statement time per event measured (ms),
	// StatementsPerEvent its statements per event: everything run on the
	// side's database from the end of the warm-up until the last handler
	// started (statements.go). Zero: not tracked.
	DBPerEvent, StatementsPerEvent float64
}

// latencyOpts are a latency scenario's settings.
type latencyOpts struct {
	rate int
	// loaded adds the background load (loadRate) on both sides.
	loaded bool
	// others adds that many pools that take none of the measured events
	// (riverbus side; otherPools).
	others int
}

// runLatency: single-event append transactions at rate per second with
// the fan-out running, commit → handler start; against River's Insert at the
// same rate, commit → Work start.
func runLatency(ctx context.Context, e *env, name string, o latencyOpts) ([]Result, error) {
	n := max(1, int(float64(o.rate)*e.latencyDuration().Seconds()))
	rbs, raws, err := measurePair(ctx, e, name,
		func(ctx context.Context) (latencySample, error) { return latencyRiverbus(ctx, e, o, n) },
		func(ctx context.Context) (latencySample, error) { return latencyRaw(ctx, e, o, n) })
	if err != nil {
		return nil, err
	}
	med := func(s []latencySample, f func(latencySample) float64) float64 {
		return benchkit.Summarize(pick(s, f)).Median
	}
	// The latency targets (the target column of docs/performance.md), as
	// ratios to raw River in the same run.
	var p50Target, p99Target, rateTarget *Target
	switch o.rate {
	case 200:
		p50Target = &Target{Of: "ratio", Op: "<=", Value: 2.5}
		p99Target = &Target{Of: "ratio", Op: "<=", Value: 2}
	case 1000:
		p50Target = &Target{Of: "ratio", Op: "<=", Value: 1.5}
	}
	rateTarget = &Target{Of: "riverbus", Op: ">=", Value: 0.98 * float64(o.rate)}
	load := ""
	if o.loaded {
		load = fmt.Sprintf("; background load on both sides: %d/s single-event appends for another pool (riverbus; achieved %.0f/s) and River inserts into another queue (raw; achieved %.0f/s), worked by the same client",
			e.loadRate(), med(rbs, func(s latencySample) float64 { return s.LoadRate }), med(raws, func(s latencySample) float64 { return s.LoadRate }))
	}
	note := fmt.Sprintf("%d single-event transactions at %d/s from %d goroutines (achieved: riverbus %.0f/s, raw %.0f/s)%s; the fan-out services (what riverbus.Client.Start runs) with the default fanout.Config; riverbus worker settings, MaxWorkers %d; raw: Client.Insert with the same settings; job insert = the job's created_at (riverbus: the fan-out's insert); hop rows: commit → the step, p50 over the events (round: a horizon round that passed the event committed; batch: the pool batch with its job committed; fetched: River's attempted_at)",
		n, o.rate, e.appenders(), med(rbs, func(s latencySample) float64 { return s.Rate }),
		med(raws, func(s latencySample) float64 { return s.Rate }), load, latencyWorkers)
	of := func(f func(latencySample) float64) ([]float64, []float64) { return pick(rbs, f), pick(raws, f) }
	row := func(metric, unit string, target *Target, f func(latencySample) float64) Result {
		rb, raw := of(f)
		return paired(name, metric, unit, rb, raw, target, note)
	}
	hop := func(h string) func(latencySample) float64 {
		return func(s latencySample) float64 { return s.Hops[h][0] }
	}
	rows := []Result{
		row("commit → handler p50", "ms", p50Target, func(s latencySample) float64 { return s.P50 }),
		row("commit → handler p95", "ms", nil, func(s latencySample) float64 { return s.P95 }),
		row("commit → handler p99", "ms", p99Target, func(s latencySample) float64 { return s.P99 }),
		row("job insert → handler p50", "ms", nil, func(s latencySample) float64 { return s.PickupP50 }),
		row("job insert → handler p99", "ms", nil, func(s latencySample) float64 { return s.PickupP99 }),
		row("transactions achieved", "ev/s", rateTarget, func(s latencySample) float64 { return s.Rate }),
	}
	// A step the run could not time (no event matched it) has no row.
	timed := func(s []latencySample, h string) bool {
		return !slices.ContainsFunc(s, func(x latencySample) bool { _, ok := x.Hops[h]; return !ok })
	}
	for _, h := range []string{hopRound, hopBatch} {
		if timed(rbs, h) {
			rows = append(rows, Result{Scenario: name, Metric: "hop: commit → " + h + " p50", Unit: "ms",
				Riverbus: benchkit.Summarize(pick(rbs, hop(h))), Note: note})
		}
	}
	if timed(rbs, hopFetched) && timed(raws, hopFetched) {
		rows = append(rows, row("hop: commit → "+hopFetched+" p50", "ms", nil, hop(hopFetched)))
	}
	// What each event cost the database, on both sides (statements.go);
	// not with the background load, whose events are not the measured ones.
	rows = append(rows, costRows("event", rbs, raws, func(s latencySample) (float64, float64) { return s.DBPerEvent, s.StatementsPerEvent }, row)...)
	return rows, nil
}

func latencyRiverbus(ctx context.Context, e *env, o latencyOpts, n int) (latencySample, error) {
	d, err := e.newDatabase(ctx, schemaRiverbus)
	if err != nil {
		return latencySample{}, err
	}
	defer d.Drop()
	tracked := !o.loaded && d.trackStatements(ctx)
	appendDB, fanDB, workDB, closeAll, err := connectThree(ctx, d)
	if err != nil {
		return latencySample{}, err
	}
	defer closeAll()
	var filter []func(*bustype.PoolParams)
	if o.loaded {
		filter = append(filter, func(p *bustype.PoolParams) { p.Tags = []string{eventTag} })
		if _, _, err := pools.Create(ctx, appendDB, bustype.PoolParams{Name: loadKind, Tags: []string{loadTag}}); err != nil {
			return latencySample{}, err
		}
	}
	if _, err := createPools(ctx, appendDB, 1, filter...); err != nil {
		return latencySample{}, err
	}
	if _, err := otherPools(ctx, appendDB, o.others); err != nil {
		return latencySample{}, err
	}
	if err := jobHistory(ctx, e, appendDB); err != nil {
		return latencySample{}, err
	}
	if err := d.Settle(ctx, appendDB); err != nil {
		return latencySample{}, err
	}
	p := newProbe(e)
	p.trace = newTracer()
	if tracked {
		p.stats = &statements{db: appendDB}
	}
	client, err := p.startClient(ctx, e, workDB, o.loaded)
	if err != nil {
		return latencySample{}, err
	}
	defer stopClient(client)
	f, err := fanout.New(fanDB, &fanout.Config{Logger: e.Quiet, OnBatch: p.trace.batch})
	if err != nil {
		return latencySample{}, err
	}
	f.SetTrace(p.trace.engineTrace())
	defer serveFanout(ctx, f)()
	var stopLoad func() (float64, error)
	if o.loaded {
		stopLoad, err = background(ctx, d, e.loadRate(), func(db *pgxpool.Pool) (func(ctx context.Context, i int) error, error) {
			return func(ctx context.Context, i int) error {
				ev := newEvent(i)
				ev.Tags = []string{loadTag}
				_, err := outbox.Append(ctx, db, ev)
				return err
			}, nil
		})
		if err != nil {
			return latencySample{}, err
		}
	}
	s, err := p.measure(ctx, o.rate, n, nil, func(ctx context.Context, i int, id uuid.UUID) error {
		ev := newEvent(i)
		ev.EventID = id
		return p.trace.append(ctx, appendDB, ev)
	})
	return withLoad(s, err, stopLoad)
}

func latencyRaw(ctx context.Context, e *env, o latencyOpts, n int) (latencySample, error) {
	d, err := e.newDatabase(ctx, schemaRiver)
	if err != nil {
		return latencySample{}, err
	}
	defer d.Drop()
	tracked := !o.loaded && d.trackStatements(ctx)
	insertDB, _, workDB, closeAll, err := connectThree(ctx, d)
	if err != nil {
		return latencySample{}, err
	}
	defer closeAll()
	if err := jobHistory(ctx, e, insertDB); err != nil {
		return latencySample{}, err
	}
	if err := d.Settle(ctx, insertDB); err != nil {
		return latencySample{}, err
	}
	p := newProbe(e)
	if tracked {
		p.stats = &statements{db: insertDB}
	}
	client, err := p.startClient(ctx, e, workDB, o.loaded)
	if err != nil {
		return latencySample{}, err
	}
	defer stopClient(client)
	cfg, err := workers.RiverConfig(workers.RiverOpts{Config: workers.Config{Logger: e.Quiet}})
	if err != nil {
		return latencySample{}, err
	}
	inserter, err := river.NewClient(riverpgxv5.New(insertDB), cfg)
	if err != nil {
		return latencySample{}, err
	}
	var stopLoad func() (float64, error)
	if o.loaded {
		stopLoad, err = background(ctx, d, e.loadRate(), func(db *pgxpool.Pool) (func(ctx context.Context, i int) error, error) {
			loader, err := river.NewClient(riverpgxv5.New(db), cfg)
			if err != nil {
				return nil, err
			}
			opts := &river.InsertOpts{Queue: loadKind, MaxAttempts: bustype.MaxAttemptsDefault, Priority: bustype.PriorityDefault}
			return func(ctx context.Context, i int) error {
				ev := rawEvent(i)
				ev.Tags = []string{loadTag}
				_, err := loader.Insert(ctx, loadArgs{workers.Args{Event: ev}}, opts)
				return err
			}, nil
		})
		if err != nil {
			return latencySample{}, err
		}
	}
	opts := &river.InsertOpts{Queue: benchKind, MaxAttempts: bustype.MaxAttemptsDefault, Priority: bustype.PriorityDefault}
	s, err := p.measure(ctx, o.rate, n, nil, func(ctx context.Context, i int, id uuid.UUID) error {
		ev := rawEvent(i)
		ev.EventID = id
		_, err := inserter.Insert(ctx, benchArgs{workers.Args{Event: ev}}, opts)
		return err
	})
	return withLoad(s, err, stopLoad)
}

// rawEvent is event i as raw River's jobs carry it.
func rawEvent(i int) outbox.Event {
	ev := newEvent(i)
	ev.GlobalSequence = int64(i + 1)
	ev.EventID = uuid.Must(uuid.NewV7())
	ev.Metadata = json.RawMessage(`{}`)
	ev.OccurredAt = time.Now()
	return ev
}

// appenders is how many goroutines send a latency scenario's events, and
// the size of their connection pool: latencyAppenders, or a few in a smoke
// run, where each connection a server process makes costs more than the
// events sent over it.
func (e *env) appenders() int { return least(e, latencyAppenders, 2) }

// loadRate is the background load's rate: loadRate, or a tenth of it in a
// smoke run, where at the full rate the load takes the CPUs of a small
// machine for the whole scenario.
func (e *env) loadRate() int { return least(e, loadRate, loadRate/10) }

// background opens a pool of its own to d and calls the function newDo
// returns for it at rate per second, open loop, until the returned stop
// is called; stop returns the achieved rate and closes the pool.
func background(ctx context.Context, d *database, rate int, newDo func(db *pgxpool.Pool) (func(ctx context.Context, i int) error, error)) (stop func() (float64, error), err error) {
	db, err := d.Connect(ctx, int32(d.e.appenders()))
	if err != nil {
		return nil, err
	}
	do, err := newDo(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	loadCtx, cancel := context.WithCancel(ctx)
	type result struct {
		rate float64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Far more calls than a run lasts: the load ends with stop.
		achieved, err := benchkit.Paced(loadCtx, rate*3600, float64(rate), d.e.appenders(), func(_ context.Context, i int) error {
			return do(ctx, i)
		})
		done <- result{achieved, err}
	}()
	return func() (float64, error) {
		cancel()
		r := <-done
		db.Close()
		if r.err != nil && (ctx.Err() != nil || !errors.Is(r.err, context.Canceled)) {
			return 0, fmt.Errorf("background load: %w", r.err)
		}
		return r.rate, nil
	}, nil
}

// withLoad stops the background load, if any, and records its rate.
func withLoad(s latencySample, err error, stop func() (float64, error)) (latencySample, error) {
	if stop == nil {
		return s, err
	}
	rate, lerr := stop()
	if err != nil {
		return latencySample{}, err
	}
	if lerr != nil {
		return latencySample{}, lerr
	}
	s.LoadRate = rate
	return s, nil
}

// loadArgs are the background load's jobs, on both sides.
type loadArgs struct{ workers.Args }

func (loadArgs) Kind() string { return loadKind }

// connectThree opens three pools to d: appends or inserts, the fan-out, and
// the working River client, as separate processes would have.
func connectThree(ctx context.Context, d *database) (a, b, c *pgxpool.Pool, closeAll func(), err error) {
	var pools []*pgxpool.Pool
	closeAll = func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for _, size := range []int32{int32(d.e.appenders()), poolConns, workerConns} {
		p, err := d.Connect(ctx, size)
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		pools = append(pools, p)
	}
	return pools[0], pools[1], pools[2], closeAll, nil
}

// probe records when a handler first started each event's job, with the
// job's created_at and attempted_at; trace, when set, the fan-out's steps.
type probe struct {
	warmup    int // events sent before the measured ones
	appenders int // goroutines sending them
	mu        sync.Mutex
	started   map[uuid.UUID]start
	trace     *tracer
	stats     *statements // nil: the database's statements are not read
}

type start struct{ at, created, attempted time.Time }

func newProbe(e *env) *probe {
	return &probe{warmup: least(e, warmupEvents, 5), appenders: e.appenders(), started: map[uuid.UUID]start{}}
}

// startClient starts a River client with the recommended settings whose
// worker records the start time of every job; with load, it also works
// the background load's queue.
func (p *probe) startClient(ctx context.Context, e *env, db *pgxpool.Pool, load bool) (*river.Client[pgx.Tx], error) {
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(_ context.Context, job *river.Job[benchArgs]) error {
		now := time.Now()
		p.mu.Lock()
		if _, ok := p.started[job.Args.EventID]; !ok {
			s := start{at: now, created: job.CreatedAt}
			if job.AttemptedAt != nil {
				s.attempted = *job.AttemptedAt
			}
			p.started[job.Args.EventID] = s
		}
		p.mu.Unlock()
		return nil
	}))
	queues := map[string]int{benchKind: latencyWorkers}
	if load {
		river.AddWorker(w, river.WorkFunc(func(context.Context, *river.Job[loadArgs]) error { return nil }))
		queues[loadKind] = latencyWorkers
	}
	cfg, err := workers.RiverConfig(workers.RiverOpts{Queues: queues, Workers: w, Config: workers.Config{Logger: e.Quiet}})
	if err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(db), cfg)
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return client, nil
}

// measure sends p.warmup unmeasured events, then n events at rate per
// second, and returns the percentiles of commit → handler start. begin, when
// not nil, is called after the warm-up; when the channel it returns closes,
// no more events are sent and those sent so far are measured.
func (p *probe) measure(ctx context.Context, rate, n int, begin func(ctx context.Context) (until <-chan struct{}, err error), send func(ctx context.Context, i int, id uuid.UUID) error) (latencySample, error) {
	warm := newIDs(p.warmup)
	if _, err := benchkit.Paced(ctx, len(warm), float64(rate), p.appenders, func(ctx context.Context, i int) error {
		return send(ctx, i, warm[i])
	}); err != nil {
		return latencySample{}, err
	}
	if err := p.wait(ctx, warm); err != nil {
		return latencySample{}, fmt.Errorf("warm-up: %w", err)
	}
	if p.stats != nil {
		if err := p.stats.reset(ctx); err != nil {
			return latencySample{}, err
		}
	}

	// pacing ends when until closes; the sends run on ctx, so none is
	// cut short.
	pacing, stopPacing := context.WithCancel(ctx)
	defer stopPacing()
	if begin != nil {
		until, err := begin(pacing)
		if err != nil {
			return latencySample{}, err
		}
		go func() {
			select {
			case <-until:
				stopPacing()
			case <-pacing.Done():
			}
		}()
	}
	ids := newIDs(n)
	commits := make([]time.Time, n)
	achieved, err := benchkit.Paced(pacing, n, float64(rate), p.appenders, func(_ context.Context, i int) error {
		err := send(ctx, p.warmup+i, ids[i])
		if err == nil {
			commits[i] = time.Now()
		}
		return err
	})
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.Canceled)) {
		return latencySample{}, err
	}
	sent := ids[:0:0]
	var sentCommits []time.Time
	for i, id := range ids {
		if !commits[i].IsZero() {
			sent, sentCommits = append(sent, id), append(sentCommits, commits[i])
		}
	}
	if len(sent) == 0 {
		return latencySample{}, errors.New("no event was sent")
	}
	if err := p.wait(ctx, sent); err != nil {
		return latencySample{}, err
	}
	var dbMs float64
	var calls int64
	if p.stats != nil {
		if dbMs, calls, err = p.stats.totals(ctx); err != nil {
			return latencySample{}, err
		}
	}
	if p.trace != nil {
		p.trace.waitSteps(ctx, sent)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	lat := make([]float64, len(sent))
	pickup := make([]float64, len(sent))
	hops := map[string][]float64{}
	p.mu.Lock()
	for i, id := range sent {
		s, c := p.started[id], sentCommits[i]
		lat[i] = ms(s.at.Sub(c))
		pickup[i] = ms(s.at.Sub(s.created))
		if !s.attempted.IsZero() {
			hops[hopFetched] = append(hops[hopFetched], ms(s.attempted.Sub(c)))
		}
	}
	p.mu.Unlock()
	if p.trace != nil {
		for h, at := range p.trace.steps(sent) {
			for i, t := range at {
				if !t.IsZero() {
					hops[h] = append(hops[h], ms(t.Sub(sentCommits[i])))
				}
			}
		}
	}
	slices.Sort(lat)
	slices.Sort(pickup)
	sample := latencySample{
		P50: benchkit.Percentile(lat, 50), P95: benchkit.Percentile(lat, 95), P99: benchkit.Percentile(lat, 99),
		PickupP50: benchkit.Percentile(pickup, 50), PickupP99: benchkit.Percentile(pickup, 99), Rate: achieved,
		Events: len(sent), Hops: map[string][2]float64{},
		DBPerEvent: dbMs / float64(len(sent)), StatementsPerEvent: float64(calls) / float64(len(sent)),
	}
	for h, v := range hops {
		slices.Sort(v)
		sample.Hops[h] = [2]float64{benchkit.Percentile(v, 50), benchkit.Percentile(v, 99)}
	}
	if t := p.trace; t != nil {
		t.mu.Lock()
		took := slices.Sorted(slices.Values(t.took))
		sample.Rounds, sample.Holding, sample.Batches = len(t.rounds), t.holding, len(t.batches)
		t.mu.Unlock()
		sample.RoundP50, sample.RoundP99 = benchkit.Percentile(took, 50), benchkit.Percentile(took, 99)
	}
	return sample, nil
}

// tracer collects the fan-out's steps for the events the bench appends:
// each event's sequence, the horizon rounds and the measured pool's
// batches.
type tracer struct {
	mu      sync.Mutex
	seqs    map[uuid.UUID]int64
	rounds  []mark    // horizon after each round, in order
	took    []float64 // each round's duration, ms
	holding int       // rounds that waited at a gap
	batches []mark    // the measured pool's cursor after each batch, in order
}

type mark struct {
	at  time.Time
	seq int64
}

func newTracer() *tracer { return &tracer{seqs: map[uuid.UUID]int64{}} }

// append appends ev as the application would (outbox.Append on a pool)
// and notes its sequence.
func (t *tracer) append(ctx context.Context, db *pgxpool.Pool, ev outbox.Event) error {
	a, err := outbox.Append(ctx, db, ev)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.seqs[ev.EventID] = a[0].GlobalSequence
	t.mu.Unlock()
	return nil
}

func (t *tracer) engineTrace() fanout.Trace {
	return fanout.Trace{
		Round: func(r fanout.RoundResult, at time.Time) {
			t.mu.Lock()
			t.rounds = append(t.rounds, mark{at, r.Horizon})
			t.took = append(t.took, float64(r.Took)/float64(time.Millisecond))
			if r.Holding {
				t.holding++
			}
			t.mu.Unlock()
		},
	}
}

// batch is the fan-out's OnBatch.
func (t *tracer) batch(res fanout.BatchResult) {
	if res.Pool != benchKind {
		return
	}
	at := time.Now()
	t.mu.Lock()
	t.batches = append(t.batches, mark{at, res.Cursor})
	t.mu.Unlock()
}

// waitSteps waits, a few seconds at most, until the fan-out has reported
// the round and the batch that passed the last of ids: it reports a batch
// (OnBatch) after its commit, when River may have started the batch's jobs
// already, and an event whose batch is not reported has no steps.
func (t *tracer) waitSteps(ctx context.Context, ids []uuid.UUID) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		t.mu.Lock()
		var last int64
		for _, id := range ids {
			last = max(last, t.seqs[id])
		}
		passed := func(marks []mark) bool { return len(marks) > 0 && marks[len(marks)-1].seq >= last }
		done := passed(t.rounds) && passed(t.batches)
		t.mu.Unlock()
		if done {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// steps returns, for each step, when each of ids reached it (zero: not
// known).
func (t *tracer) steps(ids []uuid.UUID) map[string][]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	first := func(marks []mark, seq int64) time.Time {
		i := sort.Search(len(marks), func(i int) bool { return marks[i].seq >= seq })
		if i == len(marks) {
			return time.Time{}
		}
		return marks[i].at
	}
	out := map[string][]time.Time{hopRound: make([]time.Time, len(ids)), hopBatch: make([]time.Time, len(ids))}
	for i, id := range ids {
		if seq, ok := t.seqs[id]; ok {
			out[hopRound][i] = first(t.rounds, seq)
			out[hopBatch][i] = first(t.batches, seq)
		}
	}
	return out
}

// wait waits until every id has been started.
func (p *probe) wait(ctx context.Context, ids []uuid.UUID) error {
	deadline := time.Now().Add(time.Minute)
	for {
		p.mu.Lock()
		missing := 0
		for _, id := range ids {
			if _, ok := p.started[id]; !ok {
				missing++
			}
		}
		p.mu.Unlock()
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs not started after a minute", missing, len(ids))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func newIDs(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	return ids
}

// latencyHistory is how many completed jobs of another queue both sides'
// river_job hold before a latency run, as a deployment's table holds the
// day of completed jobs River keeps. On a table analyzed empty, River's
// fetch keeps a plan of sequential scans until autovacuum analyzes the
// growing table, which it does at a moment of its own choosing, on one
// side and not the other, so the two sides' fetches read very different
// amounts of the table and the comparison measured the planner's timing.
// With a history analyzed beforehand both sides fetch through the index
// from the first job.
const latencyHistory = 5_000

// jobHistory inserts latencyHistory completed jobs of another queue (a
// smoke run, a few).
func jobHistory(ctx context.Context, e *env, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, attempt, attempted_at, finalized_at)
		SELECT '{}', 'bench_history', 1, 1, 'bench_history', 'completed', 1, now(), now() FROM generate_series(1, $1)`, least(e, latencyHistory, 100))
	if err != nil {
		return fmt.Errorf("job history: %w", err)
	}
	return nil
}
