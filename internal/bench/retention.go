package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/retention"
)

// retentionSizes are the log sizes the retention scenario trims: a batch
// must cost the same at both.
var retentionSizes = []int{100_000, 1_000_000}

// retentionRun is one trim of a whole log.
type retentionRun struct {
	seconds    float64
	batchMs    []float64 // each batch's time, in order
	heapPeakMB float64   // the Go heap in use, sampled after each batch
	deleted    int64
}

// runRetention: event retention deleting a whole log (every pool has
// passed it, policy until-consumed) in batches of the default size, at two
// log sizes, and one plain DELETE of the 1M log for comparison. It reports
// the time, the batch cost at the start and the end of each trim and across
// sizes (flat: a batch costs what it costs whatever the table's size), and
// the Go heap in use while it runs.
func runRetention(ctx context.Context, e *env) ([]Result, error) {
	const name = "retention"
	sizes := make([]int, len(retentionSizes))
	for i, n := range retentionSizes {
		sizes[i] = e.Scaled(n, least(e, 2000, 500)*(i+1))
	}
	secs := make([][]float64, len(sizes))
	batch := make([][]float64, len(sizes))
	firstLast := make([][]float64, len(sizes))
	heap := make([][]float64, len(sizes))
	// The batches that deleted the first sizes[0] events of each log: the
	// same work on tables of different sizes.
	early := make([][]float64, len(sizes))
	var plain, single, singleBatch []float64
	for run := range min(e.Opts.Runs, 2) {
		for i, n := range sizes {
			r, err := retentionTrimRun(ctx, e, n, false)
			if err != nil {
				return nil, fmt.Errorf("run %d, %d events: %w", run+1, n, err)
			}
			med := benchkit.Summarize(r.batchMs).Median
			tenth := max(1, len(r.batchMs)/10)
			head, tail := benchkit.Summarize(r.batchMs[:tenth]).Median, benchkit.Summarize(r.batchMs[len(r.batchMs)-tenth:]).Median
			e.Log.Info("bench: measured", "scenario", name, "run", run+1, "events", n, "seconds", r.seconds,
				"batches", len(r.batchMs), "batch_ms_median", med, "first_tenth_ms", head, "last_tenth_ms", tail, "heap_peak_mb", r.heapPeakMB)
			k := max(1, sizes[0]/retention.BatchSizeDefault)
			early[i] = append(early[i], benchkit.Summarize(r.batchMs[:min(k, len(r.batchMs))]).Median)
			secs[i] = append(secs[i], r.seconds)
			batch[i] = append(batch[i], med)
			firstLast[i] = append(firstLast[i], tail/head)
			heap[i] = append(heap[i], r.heapPeakMB)
		}
		r, err := retentionTrimRun(ctx, e, sizes[len(sizes)-1], true)
		if err != nil {
			return nil, fmt.Errorf("run %d, one event per transaction: %w", run+1, err)
		}
		e.Log.Info("bench: measured", "scenario", name, "run", run+1, "events", sizes[len(sizes)-1], "one_per_tx", true,
			"seconds", r.seconds, "batch_ms_median", benchkit.Summarize(r.batchMs).Median, "heap_peak_mb", r.heapPeakMB)
		single = append(single, r.seconds)
		singleBatch = append(singleBatch, benchkit.Summarize(r.batchMs).Median)
		s, err := retentionPlainDelete(ctx, e, sizes[len(sizes)-1])
		if err != nil {
			return nil, fmt.Errorf("run %d, plain DELETE: %w", run+1, err)
		}
		e.Log.Info("bench: measured", "scenario", name, "run", run+1, "plain_delete_seconds", s)
		plain = append(plain, s)
	}
	last := len(sizes) - 1
	note := fmt.Sprintf("%d run(s); riverbus retention --apply over a log every pool has passed, %d events a batch (one transaction each), the events copied 10k per transaction; batch ms = median batch; heap = Go heap in use after each batch",
		len(plain), retention.BatchSizeDefault)
	var rows []Result
	for i, n := range sizes {
		rows = append(rows,
			Result{Scenario: name, Metric: "trim " + count(n) + " events", Unit: "s", Riverbus: benchkit.Summarize(secs[i]), Note: note},
			Result{Scenario: name, Metric: "batch, " + count(n) + " events", Unit: "ms", Riverbus: benchkit.Summarize(batch[i]), Note: note},
			Result{Scenario: name, Metric: "last/first tenth of batches, " + count(n), Unit: "x", Riverbus: benchkit.Summarize(firstLast[i]),
				Target: &Target{Of: "riverbus", Op: "<=", Value: 1.5}, Note: note},
			Result{Scenario: name, Metric: "Go heap peak, " + count(n) + " events", Unit: "MB", Riverbus: benchkit.Summarize(heap[i]), Note: note},
		)
	}
	rows = append(rows,
		Result{Scenario: name, Metric: fmt.Sprintf("first %s events' batches, %s log vs %s log (flat)", count(sizes[0]), count(sizes[last]), count(sizes[0])), Unit: "x",
			Riverbus: benchkit.Summarize(benchkit.Ratios(early[last], early[0])), Target: &Target{Of: "riverbus", Op: "<=", Value: 1.5}, Note: note},
		Result{Scenario: name, Metric: fmt.Sprintf("median batch, %s log vs %s log", count(sizes[last]), count(sizes[0])), Unit: "x",
			Riverbus: benchkit.Summarize(benchkit.Ratios(batch[last], batch[0])), Note: note},
		Result{Scenario: name, Metric: "trim " + count(sizes[last]) + " events, one per transaction", Unit: "s", Riverbus: benchkit.Summarize(single), Note: note},
		Result{Scenario: name, Metric: "batch, " + count(sizes[last]) + " events, one per transaction", Unit: "ms", Riverbus: benchkit.Summarize(singleBatch), Note: note},
		Result{Scenario: name, Metric: "one plain DELETE, " + count(sizes[last]) + " events", Unit: "s", Riverbus: benchkit.Summarize(plain),
			Note: "for comparison: one statement, one transaction holding every row lock and the whole WAL until it commits"},
	)
	return rows, nil
}

// retentionLog makes a database with n events that one pool has passed,
// copied 10k per transaction, or with onePerTx each in a transaction of its
// own as most applications append (the transaction ids are rewritten after
// the copy, with riverbus's triggers off for that statement only).
func retentionLog(ctx context.Context, e *env, n int, onePerTx bool) (*database, *pgxpool.Pool, error) {
	d, db, release, err := e.open(ctx, schemaRiverbus, poolConns)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*database, *pgxpool.Pool, error) {
		release()
		return nil, nil, err
	}
	last, err := copyEvents(ctx, db, n, 0)
	if err != nil {
		return fail(err)
	}
	if onePerTx {
		for _, sql := range []string{
			`ALTER TABLE riverbus_event DISABLE TRIGGER USER`,
			`UPDATE riverbus_event SET transaction_id = (global_sequence + 1000)::text::xid8`,
			`ALTER TABLE riverbus_event ENABLE TRIGGER USER`,
			`VACUUM riverbus_event`,
		} {
			if _, err := db.Exec(ctx, sql); err != nil {
				return fail(fmt.Errorf("one event per transaction: %w", err))
			}
		}
	}
	// The horizon passed every event (copied contiguously), and a pool
	// made now has passed them too.
	if _, err := db.Exec(ctx, `UPDATE riverbus_horizon SET horizon = $1`, last); err != nil {
		return fail(err)
	}
	if _, err := createPools(ctx, db, 1, func(p *bustype.PoolParams) { p.From = bustype.FromNow }); err != nil {
		return fail(err)
	}
	if err := d.Settle(ctx, db); err != nil {
		return fail(err)
	}
	return d, db, nil
}

func retentionTrimRun(ctx context.Context, e *env, n int, onePerTx bool) (retentionRun, error) {
	d, db, err := retentionLog(ctx, e, n, onePerTx)
	if err != nil {
		return retentionRun{}, err
	}
	defer d.Drop()
	defer db.Close()
	if _, err := retention.SetPolicy(ctx, db, true, 0); err != nil {
		return retentionRun{}, err
	}
	var (
		r      retentionRun
		ms     runtime.MemStats
		prev   = time.Now()
		before int64
	)
	start := prev
	plan, err := retention.Trim(ctx, db, &retention.Opts{Progress: func(p bustype.RetentionPlan) {
		now := time.Now()
		// A step that deleted nothing only found the floor.
		if p.Events > before {
			r.batchMs = append(r.batchMs, float64(now.Sub(prev).Microseconds())/1000)
		}
		before, prev = p.Events, now
		runtime.ReadMemStats(&ms)
		r.heapPeakMB = max(r.heapPeakMB, float64(ms.HeapInuse)/1e6)
	}})
	if err != nil {
		return r, err
	}
	r.seconds = time.Since(start).Seconds()
	r.deleted = plan.Events
	if r.deleted != int64(n) {
		return r, fmt.Errorf("deleted %d events, want %d (stopped by %s)", r.deleted, n, plan.StoppedBy)
	}
	return r, nil
}

func retentionPlainDelete(ctx context.Context, e *env, n int) (float64, error) {
	d, db, err := retentionLog(ctx, e, n, false)
	if err != nil {
		return 0, err
	}
	defer d.Drop()
	defer db.Close()
	start := time.Now()
	tag, err := db.Exec(ctx, `DELETE FROM riverbus_event WHERE global_sequence <= (SELECT horizon FROM riverbus_horizon)`)
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() != int64(n) {
		return 0, fmt.Errorf("deleted %d events, want %d", tag.RowsAffected(), n)
	}
	return time.Since(start).Seconds(), nil
}
