package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/poolmix"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

const (
	// manyPoolsOthers is how many pools the many-pools scenario adds
	// beside the measured one (scaled, at least manyPoolsOthersMin).
	manyPoolsOthers    = 300
	manyPoolsOthersMin = 20
	// idleWindow is how long an idle process's transactions are counted;
	// PostgreSQL's statistics reach pg_stat_database a second or so late,
	// which a window of several seconds makes small.
	idleWindow    = 5 * time.Second
	idleWindowMin = 2 * time.Second
	// smokeIdleWindow is a smoke run's: a busy backend reports its
	// transactions at least every second, so a window a little longer
	// still counts some of every idle process's.
	smokeIdleWindow = 1200 * time.Millisecond
	// idlePollSlow is the worker's FetchPollInterval of the row that
	// shows how a longer one cuts a worker's idle cost.
	idlePollSlow = time.Second
)

// runManyPools: latency-200's pool alone, against the same pool beside
// manyPoolsOthers pools of every kind whose filters take none of its
// events, in the same run; then what an idle fan-out and an idle worker
// process cost the database with that many pools (transactions a second).
func runManyPools(ctx context.Context, e *env) ([]Result, error) {
	const name, rate = "many-pools", 200
	n := max(1, int(float64(rate)*e.latencyDuration().Seconds()))
	// Every kind of pool, in a smoke run too (poolmix takes turns).
	others := e.Scaled(manyPoolsOthers, least(e, manyPoolsOthersMin, 5))
	many, alone, err := measurePair(ctx, e, name,
		func(ctx context.Context) (latencySample, error) {
			return latencyRiverbus(ctx, e, latencyOpts{rate: rate, others: others}, n)
		},
		func(ctx context.Context) (latencySample, error) {
			return latencyRiverbus(ctx, e, latencyOpts{rate: rate}, n)
		})
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("latency-200's pool (no filter) beside %d pools of every kind (plain path with a type or a tag filter, key-ordered, transaction-grouped, both filters) that take none of its events; baseline column: the same pool alone, same run; %d single-event transactions at %d/s; the fan-out services with the default fanout.Config",
		others, n, rate)
	row := func(metric, unit string, target *Target, f func(latencySample) float64) Result {
		return paired(name, metric, unit, pick(many, f), pick(alone, f), target, note)
	}
	rows := []Result{
		row("commit → handler p50", "ms", &Target{Of: "ratio", Op: "<=", Value: 2}, func(s latencySample) float64 { return s.P50 }),
		row("commit → handler p99", "ms", &Target{Of: "ratio", Op: "<=", Value: 3}, func(s latencySample) float64 { return s.P99 }),
		row("hop: commit → batch p50", "ms", nil, func(s latencySample) float64 { return s.Hops[hopBatch][0] }),
		row("transactions achieved", "ev/s", nil, func(s latencySample) float64 { return s.Rate }),
	}

	all := others + 1
	var fanIdle, workIdle, workSlow []float64
	for range e.Opts.Runs {
		v, err := idleFanout(ctx, e, all)
		if err != nil {
			return rows, fmt.Errorf("idle fan-out: %w", err)
		}
		fanIdle = append(fanIdle, v)
		if v, err = idleWorker(ctx, e, all, 0); err != nil {
			return rows, fmt.Errorf("idle worker: %w", err)
		}
		workIdle = append(workIdle, v)
		if v, err = idleWorker(ctx, e, all, idlePollSlow); err != nil {
			return rows, fmt.Errorf("idle worker: %w", err)
		}
		workSlow = append(workSlow, v)
	}
	idleNote := fmt.Sprintf("%d pools, nothing appended: xact_commit + xact_rollback of the database over %s, from pg_stat_database", all, e.idleWindow())
	rows = append(rows,
		Result{Scenario: name, Metric: fmt.Sprintf("idle fan-out, %d pools", all), Unit: "tx/s", Riverbus: benchkit.Summarize(fanIdle),
			Target: &Target{Of: "riverbus", Op: "<=", Value: 100},
			Note:   idleNote + "; a riverbus.Client with the fan-out and its defaults (horizon, pools, lane sweeper, checkpoint advancer, retention), no workers"},
		Result{Scenario: name, Metric: fmt.Sprintf("idle worker, %d queues", all), Unit: "tx/s", Riverbus: benchkit.Summarize(workIdle),
			Note: idleNote + fmt.Sprintf("; one River client with riverbus worker settings (FetchPollInterval %s) serving a queue per pool", workers.FetchPollIntervalDefault)},
		Result{Scenario: name, Metric: fmt.Sprintf("idle worker, %d queues, poll %s", all, idlePollSlow), Unit: "tx/s", Riverbus: benchkit.Summarize(workSlow),
			Note: idleNote + fmt.Sprintf("; the same with FetchPollInterval %s: new jobs still wake it at once by River's insert notification, which every fan-out batch sends", idlePollSlow)},
	)
	return rows, nil
}

// otherPools creates n pools of every kind whose filters take none of the
// bench's events (type eventType, tag eventTag).
func otherPools(ctx context.Context, db *pgxpool.Pool, n int) ([]string, error) {
	names := make([]string, n)
	for i, p := range poolmix.Params(n, eventType) {
		if _, _, err := pools.Create(ctx, db, p); err != nil {
			return nil, err
		}
		names[i] = p.Name
	}
	return names, nil
}

// transactions returns the transactions the database of db has committed
// and rolled back.
func transactions(ctx context.Context, db *pgxpool.Pool) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// idleWindow is idleWindow scaled, at least idleWindowMin; in a smoke run
// at least smokeIdleWindow.
func (e *env) idleWindow() time.Duration {
	return e.ScaledDuration(idleWindow, least(e, idleWindowMin, smokeIdleWindow))
}

// idleRate counts the transactions of db's database over the idle window,
// per second.
func idleRate(ctx context.Context, e *env, db *pgxpool.Pool) (float64, error) {
	window := e.idleWindow()
	before, err := transactions(ctx, db)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window):
	}
	after, err := transactions(ctx, db)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / time.Since(began).Seconds(), nil
}

// idleFanout: a riverbus.Client running the fan-out for n pools (the
// bench pool and others), caught up, with nothing appended.
func idleFanout(ctx context.Context, e *env, n int) (float64, error) {
	_, db, release, err := e.open(ctx, schemaRiverbus, poolConns)
	if err != nil {
		return 0, err
	}
	defer release()
	if _, err := otherPools(ctx, db, n-1); err != nil {
		return 0, err
	}
	if _, err := createPools(ctx, db, 1); err != nil {
		return 0, err
	}
	a, err := outbox.Append(ctx, db, newEvent(0))
	if err != nil {
		return 0, err
	}
	client, err := riverbus.NewClient(db, &riverbus.Config{Logger: e.Quiet})
	if err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()
	deadline := time.Now().Add(time.Minute)
	for {
		var behind int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM riverbus_pool WHERE cursor_seq < $1`, a[0].GlobalSequence).Scan(&behind); err != nil {
			return 0, err
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d pools not caught up after a minute", behind)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return idleRate(ctx, e, db)
}

// idleWorker: a River client with riverbus worker settings (fetchPoll its
// FetchPollInterval; 0: the default) serving a queue per pool, n queues,
// with no job.
func idleWorker(ctx context.Context, e *env, n int, fetchPoll time.Duration) (float64, error) {
	_, db, release, err := e.open(ctx, schemaRiverbus, workerConns)
	if err != nil {
		return 0, err
	}
	defer release()
	queues := map[string]int{}
	for i := range n {
		queues[fmt.Sprintf("queue_%03d", i)] = 10
	}
	w := river.NewWorkers()
	river.AddWorker(w, river.WorkFunc(func(context.Context, *river.Job[benchArgs]) error { return nil }))
	cfg, err := workers.RiverConfig(workers.RiverOpts{Queues: queues, Workers: w, DB: db,
		Config: workers.Config{Logger: e.Quiet, FetchPollInterval: fetchPoll}})
	if err != nil {
		return 0, err
	}
	client, err := river.NewClient(workers.NewDriver(db, e.Quiet), cfg)
	if err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer stopClient(client)
	return idleRate(ctx, e, db)
}
