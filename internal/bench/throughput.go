package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/workers"
)

const (
	fanoutEvents = 100_000
	drainJobs    = 50_000
	// drainWorkers is the queue's MaxWorkers in the drain scenario.
	drainWorkers = 100
	// poolConns is the connection pool size of every fan-out, appender and
	// inserter (the CLI's minimum); workerConns that of River clients that
	// work jobs.
	poolConns   = 10
	workerConns = 20
	// phaseTimeout bounds every timed phase.
	phaseTimeout = 10 * time.Minute
)

// measurePair runs riverbus and raw once per run, alternating which goes
// first, and returns their figures in run order.
func measurePair[T any](ctx context.Context, e *env, name string, rb, raw func(ctx context.Context) (T, error)) (rbs, raws []T, err error) {
	for run := range e.Opts.Runs {
		sides := []struct {
			side string
			f    func(ctx context.Context) (T, error)
			out  *[]T
		}{{"riverbus", rb, &rbs}, {"raw River", raw, &raws}}
		if !riverbusFirst(run) {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, s := range sides {
			v, err := s.f(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("run %d, %s: %w", run+1, s.side, err)
			}
			e.Log.Info("bench: measured", "scenario", name, "run", run+1, "side", s.side, "value", fmt.Sprintf("%+v", v))
			*s.out = append(*s.out, v)
		}
	}
	return rbs, raws, nil
}

// runFanout: the fan-out catching up on n events for pools pools, against
// River's InsertManyFast of the same n×pools job rows.
func runFanout(ctx context.Context, e *env, name string, pools int) ([]Result, error) {
	n := e.Scaled(fanoutEvents, 100)
	var rbSize, rawSize float64
	rb := func(ctx context.Context) (float64, error) {
		rate, size, err := fanoutRiverbus(ctx, e, n, pools)
		rbSize = size
		return rate, err
	}
	raw := func(ctx context.Context) (float64, error) {
		rate, size, err := fanoutRaw(ctx, e, n, pools)
		rawSize = size
		return rate, err
	}
	rbs, raws, err := measurePair(ctx, e, name, rb, raw)
	if err != nil {
		return nil, err
	}
	conc := min(pools, fanout.WorkersDefault)
	note := fmt.Sprintf("%d events × %d pool(s), BatchSize %d, Pass loop; raw: InsertManyFastTx of the same %d jobs, %d per tx, %d inserter(s); args ≈ %.0f B (raw %.0f B)",
		n, pools, insertBatch, n*pools, insertBatch, conc, rbSize, rawSize)
	return []Result{paired(name, "throughput", "jobs/s", rbs, raws, &Target{Of: "ratio", Op: ">=", Value: 0.8}, note)}, nil
}

// backlog is a fresh riverbus database holding n events over keys keys
// (0: one per event) and pools pools, settled, with a Fanout ready to catch
// up: what the fan-out measurements start from. close releases it all.
type backlog struct {
	d     *database
	db    *pgxpool.Pool
	f     *fanout.Fanout
	last  int64
	close func()
	// tracked: the database's statements are tracked (statements.go).
	tracked bool
}

// newBacklog appends n events to a fresh database and creates pools with
// opts. With track its statements are tracked (when the server can:
// backlog.tracked), for the scenarios that report them; the others leave
// their raw side's conditions alone.
func newBacklog(ctx context.Context, e *env, track bool, conns int32, n, keys, pools int, opts ...func(*bustype.PoolParams)) (*backlog, error) {
	d, err := e.newDatabase(ctx, schemaRiverbus)
	if err != nil {
		return nil, err
	}
	tracked := track && d.trackStatements(ctx)
	db, err := d.Connect(ctx, conns)
	if err != nil {
		d.Drop()
		return nil, err
	}
	b := &backlog{d: d, db: db, tracked: tracked, close: func() { db.Close(); d.Drop() }}
	err = func() error {
		if b.last, err = copyEvents(ctx, db, n, keys); err != nil {
			return err
		}
		if _, err := createPools(ctx, db, pools, opts...); err != nil {
			return err
		}
		if err := d.Settle(ctx, db); err != nil {
			return err
		}
		b.f, err = fanout.New(db, &fanout.Config{BatchSize: insertBatch, Logger: e.Quiet})
		return err
	}()
	if err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// catchUp times the Fanout catching up with the whole backlog.
func (b *backlog) catchUp(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	err := catchUp(ctx, b.f, b.db, b.last, phaseTimeout)
	return time.Since(start), err
}

func fanoutRiverbus(ctx context.Context, e *env, n, pools int) (rate, size float64, err error) {
	b, err := newBacklog(ctx, e, false, poolConns, n, 0, pools)
	if err != nil {
		return 0, 0, err
	}
	defer b.close()
	db := b.db
	elapsed, err := b.catchUp(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := expectJobs(ctx, db, n*pools, ""); err != nil {
		return 0, 0, err
	}
	size, err = argsSize(ctx, db)
	return float64(n*pools) / elapsed.Seconds(), size, err
}

func fanoutRaw(ctx context.Context, e *env, n, pools int) (rate, size float64, err error) {
	d, db, release, err := e.open(ctx, schemaRiver, poolConns)
	if err != nil {
		return 0, 0, err
	}
	defer release()
	client, err := river.NewClient(riverpgxv5.New(db), &river.Config{Logger: e.Quiet})
	if err != nil {
		return 0, 0, err
	}
	batches := rawBatches(rawEvents(n), poolNames(pools))
	if err := d.Settle(ctx, db); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := insertRaw(ctx, client, db, batches, min(pools, fanout.WorkersDefault)); err != nil {
		return 0, 0, err
	}
	elapsed := time.Since(start)
	if err := expectJobs(ctx, db, n*pools, ""); err != nil {
		return 0, 0, err
	}
	size, err = argsSize(ctx, db)
	return float64(n*pools) / elapsed.Seconds(), size, err
}

// expectJobs checks that the database holds want jobs (in state, when set).
func expectJobs(ctx context.Context, db *pgxpool.Pool, want int, state string) error {
	var got int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE $1 = '' OR state::text = $1", state).Scan(&got); err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("expected %d jobs %s, found %d", want, state, got)
	}
	return nil
}

// runDrain: a River client with riverbus's recommended settings completing
// jobs the fan-out created, against the same number of raw River jobs with
// args of a few bytes, the same settings.
func runDrain(ctx context.Context, e *env) ([]Result, error) {
	n := e.Scaled(drainJobs, 50)
	rb := func(ctx context.Context) (drained, error) {
		_, dr, err := fanOutAndDrain(ctx, e, true, n, 0)
		return dr, err
	}
	// River at its best: jobs with args of a few bytes, which cost River's
	// GIN index on args next to nothing (drain-args measures what an
	// envelope costs raw River).
	raw := func(ctx context.Context) (drained, error) { return rawDrain(ctx, e, n, true) }
	rbs, raws, err := measurePair(ctx, e, "drain", rb, raw)
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("%d no-op jobs, riverbus worker settings (FetchCooldown %s, FetchPollInterval %s), MaxWorkers %d, timed from Client.Start to the last completed event; RAW RIVER drains jobs with args of a few bytes (River at its best), riverbus its event envelopes",
		n, workers.FetchCooldownDefault, workers.FetchPollIntervalDefault, drainWorkers)
	return drainRows("drain", rbs, raws, &Target{Of: "ratio", Op: ">=", Value: 0.9}, note), nil
}

// drainRows are a drain scenario's rows: the throughput and, when both
// sides' statements were tracked, what each job cost the database.
func drainRows(name string, rbs, raws []drained, target *Target, note string) []Result {
	row := func(metric, unit string, target *Target, f func(drained) float64) Result {
		return paired(name, metric, unit, pick(rbs, f), pick(raws, f), target, note)
	}
	rows := []Result{row("throughput", "jobs/s", target, func(d drained) float64 { return d.Rate })}
	return append(rows, costRows("job", rbs, raws, func(d drained) (float64, float64) { return d.DBPerJob, d.StatementsPerJob }, row)...)
}

// fanOutAndDrain appends n events (keys as for eventKeyOf), creates one
// pool with opts, and returns how fast the fan-out created the pool's jobs
// and how fast a River client then completed them (with track, also what
// each job cost the database: newBacklog).
func fanOutAndDrain(ctx context.Context, e *env, track bool, n, keys int, opts ...func(*bustype.PoolParams)) (fanRate float64, dr drained, err error) {
	b, err := newBacklog(ctx, e, track, workerConns, n, keys, 1, opts...)
	if err != nil {
		return 0, drained{}, err
	}
	defer b.close()
	elapsed, err := b.catchUp(ctx)
	if err != nil {
		return 0, drained{}, err
	}
	fanRate = float64(n) / elapsed.Seconds()
	if err := b.d.Settle(ctx, b.db); err != nil {
		return 0, drained{}, err
	}
	var params bustype.PoolParams
	for _, opt := range opts {
		opt(&params)
	}
	ordered := params.Ordering != "" && params.Ordering != bustype.OrderingNone
	var stats *statements
	if b.tracked {
		stats = &statements{db: b.db}
	}
	dr, err = drain(ctx, e, b.db, n, ordered, stats)
	return fanRate, dr, err
}

// drained is what a drain measured: jobs completed per second and, when
// the database's statements are tracked, its statement time (ms) and
// statements per job (zero otherwise).
type drained struct {
	Rate, DBPerJob, StatementsPerJob float64
}

// drain starts a River client with the recommended settings and a no-op
// worker, and returns how many jobs per second it completed until all n were
// completed. ordered: the queue holds an ordered pool, and gets the River
// slots a riverbus.Client gives such a queue (workers.RiverOpts.Ordered).
func drain(ctx context.Context, e *env, db *pgxpool.Pool, n int, ordered bool, stats *statements) (drained, error) {
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(context.Context, *river.Job[benchArgs]) error { return nil }))
	opts := workers.RiverOpts{Queues: map[string]int{benchKind: drainWorkers}, Workers: w, Config: workers.Config{Logger: e.Quiet}}
	if ordered {
		opts.Ordered = []string{benchKind}
	}
	cfg, err := workers.RiverConfig(opts)
	if err != nil {
		return drained{}, err
	}
	client, err := river.NewClient(riverpgxv5.New(db), cfg)
	if err != nil {
		return drained{}, err
	}
	completed, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
		ChanSize: n + 1000, // never drop one
	})
	defer unsubscribe()
	if stats != nil {
		if err := stats.reset(ctx); err != nil {
			return drained{}, err
		}
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return drained{}, err
	}
	defer stopClient(client)
	timeout := time.NewTimer(phaseTimeout)
	defer timeout.Stop()
	for done := 0; done < n; {
		select {
		case <-completed:
			done++
		case <-timeout.C:
			return drained{}, fmt.Errorf("drain: %d of %d jobs completed after %s", done, n, phaseTimeout)
		case <-ctx.Done():
			return drained{}, ctx.Err()
		}
	}
	dr := drained{Rate: float64(n) / time.Since(start).Seconds()}
	if stats != nil {
		// Every job's completion has committed: River sends the event after.
		ms, calls, err := stats.totals(ctx)
		if err != nil {
			return drained{}, err
		}
		dr.DBPerJob, dr.StatementsPerJob = ms/float64(n), float64(calls)/float64(n)
	}
	return dr, nil
}

func stopClient(c *river.Client[pgx.Tx]) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		_ = c.StopAndCancel(context.Background())
	}
}
