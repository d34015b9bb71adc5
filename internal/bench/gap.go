package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/outbox"
)

const gapIterations = 50

// runRollbackGap: a transaction A takes a sequence and holds it, B appends
// and commits above it, and the horizon waits at A's gap; A rolls back. How
// long from A's rollback until the horizon passes B? With the fan-out's
// default Config (GapTimeout 5 s): anything near 5 s means the rollback was
// not proven and the gap timed out.
func runRollbackGap(ctx context.Context, e *env) ([]Result, error) {
	k := e.Scaled(gapIterations, least(e, 5, 2))
	var p50s, p99s, maxs []float64
	for run := range e.Opts.Runs {
		lat, err := rollbackGapRun(ctx, e, k)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run+1, err)
		}
		slices.Sort(lat)
		p50s, p99s, maxs = append(p50s, benchkit.Percentile(lat, 50)), append(p99s, benchkit.Percentile(lat, 99)), append(maxs, lat[len(lat)-1])
		e.Log.Info("bench: measured", "scenario", "rollback-gap", "run", run+1, "p50_ms", p50s[run], "p99_ms", p99s[run])
	}
	note := fmt.Sprintf("%d rollbacks per run, each after the horizon recorded the gap; the fan-out services with the default fanout.Config (GapTimeout %s, GapCheckInterval %s); timed from Rollback to the riverbus_horizon notification passing B",
		k, fanout.GapTimeoutDefault, fanout.GapCheckIntervalDefault)
	row := func(metric string, v []float64, t *Target) Result {
		return Result{Scenario: "rollback-gap", Metric: metric, Unit: "ms", Riverbus: benchkit.Summarize(v), Target: t, Note: note}
	}
	return []Result{
		row("rollback → horizon p50", p50s, nil),
		row("rollback → horizon p99", p99s, &Target{Of: "riverbus", Op: "<=", Value: 100}),
		row("rollback → horizon max", maxs, nil),
	}, nil
}

func rollbackGapRun(ctx context.Context, e *env, k int) ([]float64, error) {
	d, db, release, err := e.open(ctx, schemaRiverbus, poolConns)
	if err != nil {
		return nil, err
	}
	defer release()
	fanDB, err := d.Connect(ctx, poolConns)
	if err != nil {
		return nil, err
	}
	defer fanDB.Close()
	listener, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return nil, err
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN riverbus_horizon"); err != nil {
		return nil, err
	}

	f, err := fanout.New(fanDB, &fanout.Config{Logger: e.Quiet})
	if err != nil {
		return nil, err
	}
	defer serveFanout(ctx, f)()

	// Warm up: the fan-out is listening and the horizon moves.
	warm, err := outbox.Append(ctx, db, newEvent(0))
	if err != nil {
		return nil, err
	}
	if err := waitHorizon(ctx, listener, warm[0].GlobalSequence); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	lat := make([]float64, 0, k)
	for i := range k {
		txA, err := db.Begin(ctx)
		if err != nil {
			return nil, err
		}
		a, err := outbox.AppendTx(ctx, txA, newEvent(i))
		if err != nil {
			_ = txA.Rollback(ctx)
			return nil, err
		}
		b, err := outbox.Append(ctx, db, newEvent(i))
		if err != nil {
			_ = txA.Rollback(ctx)
			return nil, err
		}
		// A has held its sequence long enough for the horizon to stop at it.
		if err := waitGapRecorded(ctx, db, a[0].GlobalSequence); err != nil {
			_ = txA.Rollback(ctx)
			return nil, err
		}
		start := time.Now()
		if err := txA.Rollback(ctx); err != nil {
			return nil, err
		}
		if err := waitHorizon(ctx, listener, b[0].GlobalSequence); err != nil {
			return nil, err
		}
		lat = append(lat, float64(time.Since(start))/float64(time.Millisecond))
	}
	return lat, nil
}

// gapWaitMax bounds each wait of the scenario: a guard against a hang, not
// a figure. A fan-out round normally records the gap within milliseconds,
// but on a loaded machine (the smoke run inside the whole suite, beside
// other packages' tests on one server) a round can take seconds; a bound
// near GapTimeout would fail the run for a slow machine.
const gapWaitMax = time.Minute

// waitGapRecorded waits until riverbus_gap holds seq.
func waitGapRecorded(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, seq int64) error {
	deadline := time.Now().Add(gapWaitMax)
	for {
		var found bool
		err := db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM riverbus_gap WHERE $1 BETWEEN first_sequence AND last_sequence)", seq).Scan(&found)
		if err != nil {
			return err
		}
		if found {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the horizon recorded no gap at sequence %d within %s", seq, gapWaitMax)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitHorizon waits for a riverbus_horizon notification at or above seq.
func waitHorizon(ctx context.Context, conn *pgx.Conn, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, gapWaitMax)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for the horizon to pass %d: %w", seq, err)
		}
		if h, err := strconv.ParseInt(n.Payload, 10, 64); err == nil && h >= seq {
			return nil
		}
	}
}
