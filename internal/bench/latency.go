package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/engine"
	"github.com/riverbus/riverbus/internal/riverclient"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

const (
	latencyDuration    = 10 * time.Second
	latencyDurationMin = 500 * time.Millisecond
	// latencyAppenders is how many goroutines append (or insert) at once,
	// so that a slow commit does not hold back the ones due after it.
	latencyAppenders = 8
	// latencyWorkers is the queue's MaxWorkers.
	latencyWorkers = 100
	warmupEvents   = 20
)

// latencySample is one run of one side.
type latencySample struct {
	P50, P95, P99 float64 // commit → handler start, milliseconds
	// PickupP50, PickupP99: job created_at (the insert) → handler start,
	// milliseconds: River's share of the latency.
	PickupP50, PickupP99 float64
	Rate                 float64 // achieved per second
	Events               int     // how many were measured
}

// runLatency: single-event append transactions at rate per second with
// the fan-out running, commit → handler start; against River's Insert at the
// same rate, commit → Work start.
func runLatency(ctx context.Context, e *env, name string, rate int) ([]Result, error) {
	dur := max(time.Duration(float64(latencyDuration)*e.opts.Scale), latencyDurationMin)
	n := max(1, int(float64(rate)*dur.Seconds()))
	rbs, raws, err := measurePair(ctx, e, name,
		func(ctx context.Context) (latencySample, error) { return latencyRiverbus(ctx, e, rate, n) },
		func(ctx context.Context) (latencySample, error) { return latencyRaw(ctx, e, rate, n) })
	if err != nil {
		return nil, err
	}
	pick := func(s []latencySample, f func(latencySample) float64) []float64 {
		out := make([]float64, len(s))
		for i, x := range s {
			out[i] = f(x)
		}
		return out
	}
	var p50Target, p99Target *Target
	if rate == 200 {
		p50Target = &Target{Of: "riverbus", Op: "<=", Value: 5}
		p99Target = &Target{Of: "riverbus", Op: "<=", Value: 25}
	}
	note := fmt.Sprintf("%d single-event transactions at %d/s (achieved: riverbus %.0f/s, raw %.0f/s); the fan-out services (what riverbus.Client.Start runs) with the default fanout.Config; riverbus worker settings, MaxWorkers %d; raw: Client.Insert with the same settings; job insert = the job's created_at (riverbus: the fan-out's insert)",
		n, rate, summarize(pick(rbs, func(s latencySample) float64 { return s.Rate })).Median,
		summarize(pick(raws, func(s latencySample) float64 { return s.Rate })).Median, latencyWorkers)
	return []Result{
		paired(name, "commit → handler p50", "ms", pick(rbs, func(s latencySample) float64 { return s.P50 }), pick(raws, func(s latencySample) float64 { return s.P50 }), p50Target, note),
		paired(name, "commit → handler p95", "ms", pick(rbs, func(s latencySample) float64 { return s.P95 }), pick(raws, func(s latencySample) float64 { return s.P95 }), nil, note),
		paired(name, "commit → handler p99", "ms", pick(rbs, func(s latencySample) float64 { return s.P99 }), pick(raws, func(s latencySample) float64 { return s.P99 }), p99Target, note),
		paired(name, "job insert → handler p50", "ms", pick(rbs, func(s latencySample) float64 { return s.PickupP50 }), pick(raws, func(s latencySample) float64 { return s.PickupP50 }), nil, note),
		paired(name, "job insert → handler p99", "ms", pick(rbs, func(s latencySample) float64 { return s.PickupP99 }), pick(raws, func(s latencySample) float64 { return s.PickupP99 }), nil, note),
	}, nil
}

func latencyRiverbus(ctx context.Context, e *env, rate, n int) (latencySample, error) {
	d, err := e.newDatabase(ctx, schemaRiverbus)
	if err != nil {
		return latencySample{}, err
	}
	defer d.drop()
	appendDB, fanDB, workDB, closeAll, err := connectThree(ctx, d)
	if err != nil {
		return latencySample{}, err
	}
	defer closeAll()
	if _, err := createPools(ctx, appendDB, 1); err != nil {
		return latencySample{}, err
	}
	if err := d.settle(ctx, appendDB); err != nil {
		return latencySample{}, err
	}
	p := newProbe()
	client, err := p.startClient(ctx, e, workDB)
	if err != nil {
		return latencySample{}, err
	}
	defer stopClient(client)
	f, err := engine.New(fanDB, &fanout.Config{Logger: e.quiet})
	if err != nil {
		return latencySample{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = f.Run(runCtx)
	}()
	defer func() {
		stop()
		<-stopped
	}()
	return p.measure(ctx, rate, n, nil, func(ctx context.Context, i int, id uuid.UUID) error {
		ev := newEvent(i)
		ev.EventID = id
		_, err := outbox.Append(ctx, appendDB, ev)
		return err
	})
}

func latencyRaw(ctx context.Context, e *env, rate, n int) (latencySample, error) {
	d, err := e.newDatabase(ctx, schemaRiver)
	if err != nil {
		return latencySample{}, err
	}
	defer d.drop()
	insertDB, _, workDB, closeAll, err := connectThree(ctx, d)
	if err != nil {
		return latencySample{}, err
	}
	defer closeAll()
	if err := d.settle(ctx, insertDB); err != nil {
		return latencySample{}, err
	}
	p := newProbe()
	client, err := p.startClient(ctx, e, workDB)
	if err != nil {
		return latencySample{}, err
	}
	defer stopClient(client)
	cfg, err := riverclient.Config(riverclient.Opts{Config: workers.Config{Logger: e.quiet}})
	if err != nil {
		return latencySample{}, err
	}
	inserter, err := river.NewClient(riverpgxv5.New(insertDB), cfg)
	if err != nil {
		return latencySample{}, err
	}
	opts := &river.InsertOpts{Queue: benchKind, MaxAttempts: bustype.MaxAttemptsDefault, Priority: bustype.PriorityDefault}
	return p.measure(ctx, rate, n, nil, func(ctx context.Context, i int, id uuid.UUID) error {
		ev := newEvent(i)
		ev.GlobalSequence = int64(i + 1)
		ev.EventID = id
		ev.Metadata = json.RawMessage(`{}`)
		ev.OccurredAt = time.Now()
		_, err := inserter.Insert(ctx, benchArgs{workers.Args{Event: ev}}, opts)
		return err
	})
}

// connectThree opens three pools to d: appends or inserts, the fan-out, and
// the working River client, as separate processes would have.
func connectThree(ctx context.Context, d *database) (a, b, c *pgxpool.Pool, closeAll func(), err error) {
	var pools []*pgxpool.Pool
	closeAll = func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for _, size := range []int32{poolConns, poolConns, workerConns} {
		p, err := d.connect(ctx, size)
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		pools = append(pools, p)
	}
	return pools[0], pools[1], pools[2], closeAll, nil
}

// probe records when a handler first started each event's job, and the
// job's created_at.
type probe struct {
	mu      sync.Mutex
	started map[uuid.UUID]start
}

type start struct{ at, created time.Time }

func newProbe() *probe { return &probe{started: map[uuid.UUID]start{}} }

// startClient starts a River client with the recommended settings whose
// worker records the start time of every job.
func (p *probe) startClient(ctx context.Context, e *env, db *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(_ context.Context, job *river.Job[benchArgs]) error {
		now := time.Now()
		p.mu.Lock()
		if _, ok := p.started[job.Args.EventID]; !ok {
			p.started[job.Args.EventID] = start{at: now, created: job.CreatedAt}
		}
		p.mu.Unlock()
		return nil
	}))
	cfg, err := riverclient.Config(riverclient.Opts{Queues: map[string]int{benchKind: latencyWorkers}, Workers: w, Config: workers.Config{Logger: e.quiet}})
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

// measure sends warmupEvents unmeasured events, then n events at rate per
// second, and returns the percentiles of commit → handler start. begin, when
// not nil, is called after the warm-up; when the channel it returns closes,
// no more events are sent and those sent so far are measured.
func (p *probe) measure(ctx context.Context, rate, n int, begin func(ctx context.Context) (until <-chan struct{}, err error), send func(ctx context.Context, i int, id uuid.UUID) error) (latencySample, error) {
	warm := newIDs(warmupEvents)
	if _, err := paced(ctx, len(warm), float64(rate), latencyAppenders, func(ctx context.Context, i int) error {
		return send(ctx, i, warm[i])
	}); err != nil {
		return latencySample{}, err
	}
	if err := p.wait(ctx, warm); err != nil {
		return latencySample{}, fmt.Errorf("warm-up: %w", err)
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
	achieved, err := paced(pacing, n, float64(rate), latencyAppenders, func(_ context.Context, i int) error {
		err := send(ctx, warmupEvents+i, ids[i])
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
	lat := make([]float64, len(sent))
	pickup := make([]float64, len(sent))
	p.mu.Lock()
	for i, id := range sent {
		s := p.started[id]
		lat[i] = float64(s.at.Sub(sentCommits[i])) / float64(time.Millisecond)
		pickup[i] = float64(s.at.Sub(s.created)) / float64(time.Millisecond)
	}
	p.mu.Unlock()
	slices.Sort(lat)
	slices.Sort(pickup)
	return latencySample{
		P50: percentile(lat, 50), P95: percentile(lat, 95), P99: percentile(lat, 99),
		PickupP50: percentile(pickup, 50), PickupP99: percentile(pickup, 99), Rate: achieved,
		Events: len(sent),
	}, nil
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

// paced calls do(i) for i in [0, n) at rate per second, open loop: call i is
// due at start + i/rate whatever the earlier calls took, on conc goroutines.
// It returns the achieved rate.
func paced(ctx context.Context, n int, rate float64, conc int, do func(ctx context.Context, i int) error) (float64, error) {
	tickets := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range conc {
		wg.Go(func() {
			for i := range tickets {
				if err := do(ctx, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	start := time.Now()
	handed := 0
	for i := range n {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		select {
		case tickets <- i:
			handed++
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	sending := time.Since(start) // until the last call was handed out
	close(tickets)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	// Call i is due at i/rate: a run on schedule reports rate.
	achieved := rate
	if handed > 1 && sending > 0 {
		achieved = min(rate, float64(handed-1)/sending.Seconds())
	}
	return achieved, firstErr
}
