package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
)

const (
	// rebuildEvents is the backlog a pool created from the beginning
	// rebuilds in live-during-rebuild.
	rebuildEvents = 200_000
	// rebuildLiveRate is the live pool's traffic, events per second.
	rebuildLiveRate = 50
	// rebuildPool is the pool that rebuilds; the live pool is benchKind.
	rebuildPool = "rebuild"
	// rebuildMaxDuration bounds the live traffic of one run.
	rebuildMaxDuration = 3 * time.Minute
)

// runLiveDuringRebuild: a live pool taking rebuildLiveRate events per second,
// commit → handler start, while another pool, created from the beginning,
// rebuilds from a backlog of rebuildEvents; against the same live pool with
// no rebuild running. Both sides run riverbus.
func runLiveDuringRebuild(ctx context.Context, e *env) ([]Result, error) {
	const name = "live-during-rebuild"
	backlog := e.Scaled(rebuildEvents, least(e, 1000, 200))
	// The side with no rebuild sends as many events as a rebuild of the
	// backlog at about 20k events/s lasts, or latencyDurationMin.
	baseDur := max(time.Duration(float64(backlog)/20_000*float64(time.Second)), least(e, latencyDurationMin, 100*time.Millisecond))
	during, without, err := measurePair(ctx, e, name,
		func(ctx context.Context) (rebuildSample, error) {
			return liveDuringRebuild(ctx, e, backlog, true, 0)
		},
		func(ctx context.Context) (rebuildSample, error) {
			return liveDuringRebuild(ctx, e, backlog, false, max(1, int(rebuildLiveRate*baseDur.Seconds())))
		})
	if err != nil {
		return nil, err
	}
	events := func(s []rebuildSample) float64 {
		return benchkit.Summarize(pick(s, func(x rebuildSample) float64 { return float64(x.Events) })).Median
	}
	note := fmt.Sprintf("here RIVERBUS is the live pool while pool %q, created from the beginning, rebuilds a %d-event backlog, and RAW RIVER the same live pool with no rebuild (not raw River); live: single-event appends at %d/s (measured: %.0f during the rebuild, %.0f without), worked by a River client as in latency-200; the rebuilding pool's jobs are not worked; the fan-out services with the default fanout.Config",
		rebuildPool, backlog, rebuildLiveRate, events(during), events(without))
	p := func(f func(rebuildSample) float64) ([]float64, []float64) { return pick(during, f), pick(without, f) }
	p50a, p50b := p(func(s rebuildSample) float64 { return s.P50 })
	p99a, p99b := p(func(s rebuildSample) float64 { return s.P99 })
	ia, ib := p(func(s rebuildSample) float64 { return s.PickupP99 })
	rebuilt := pick(during, func(s rebuildSample) float64 { return s.Rebuild })
	return []Result{
		paired(name, "live commit → handler p50", "ms", p50a, p50b, nil, note),
		paired(name, "live commit → handler p99", "ms", p99a, p99b, &Target{Of: "riverbus", Op: "<=", Value: 250}, note),
		paired(name, "live job insert → handler p99", "ms", ia, ib, nil, note),
		{Scenario: name, Metric: "rebuild time", Unit: "s", Riverbus: benchkit.Summarize(rebuilt), Note: note},
	}, nil
}

// rebuildSample is one run of one side of live-during-rebuild.
type rebuildSample struct {
	latencySample
	Rebuild float64 // seconds from the rebuilding pool's creation until it caught up; 0 without
}

// liveDuringRebuild measures the live pool once. With rebuild, pool
// rebuildPool is created from the beginning of a backlog of backlog events
// once the live pool is warm, and live events are sent until it has caught
// up; without, n live events are sent over the same backlog.
func liveDuringRebuild(ctx context.Context, e *env, backlog int, rebuild bool, n int) (rebuildSample, error) {
	d, err := e.newDatabase(ctx, schemaRiverbus)
	if err != nil {
		return rebuildSample{}, err
	}
	defer d.Drop()
	appendDB, fanDB, workDB, closeAll, err := connectThree(ctx, d)
	if err != nil {
		return rebuildSample{}, err
	}
	defer closeAll()
	last, err := copyEvents(ctx, appendDB, backlog, 0)
	if err != nil {
		return rebuildSample{}, err
	}
	if _, _, err := pools.Create(ctx, appendDB, bustype.PoolParams{Name: benchKind, From: bustype.FromNow}); err != nil {
		return rebuildSample{}, err
	}
	if err := d.Settle(ctx, appendDB); err != nil {
		return rebuildSample{}, err
	}
	p := newProbe(e)
	client, err := p.startClient(ctx, e, workDB, false)
	if err != nil {
		return rebuildSample{}, err
	}
	defer stopClient(client)
	f, err := fanout.New(fanDB, &fanout.Config{Logger: e.Quiet})
	if err != nil {
		return rebuildSample{}, err
	}
	defer serveFanout(ctx, f)()

	send := func(ctx context.Context, i int, id uuid.UUID) error {
		ev := newEvent(i)
		ev.EventID = id
		_, err := outbox.Append(ctx, appendDB, ev)
		return err
	}
	if !rebuild {
		ls, err := p.measure(ctx, rebuildLiveRate, n, nil, send)
		return rebuildSample{latencySample: ls}, err
	}
	// The rebuild starts once the live pool is warm, and the live traffic
	// lasts until it has caught up.
	var began, caughtUp time.Time
	var done chan struct{}
	begin := func(ctx context.Context) (<-chan struct{}, error) {
		began = time.Now()
		if _, _, err := pools.Create(ctx, appendDB, bustype.PoolParams{Name: rebuildPool, From: bustype.FromBeginning}); err != nil {
			return nil, err
		}
		f.Wake()
		done = make(chan struct{})
		go waitCaughtUp(ctx, appendDB, rebuildPool, last, done, &caughtUp)
		return done, nil
	}
	n = max(1, int(rebuildLiveRate*rebuildMaxDuration.Seconds()))
	ls, err := p.measure(ctx, rebuildLiveRate, n, begin, send)
	if done != nil {
		<-done // waitCaughtUp ends with measure's context: caughtUp is set or never will be
	}
	if err != nil {
		return rebuildSample{}, err
	}
	if caughtUp.IsZero() {
		return rebuildSample{}, fmt.Errorf("pool %q did not catch up within %s", rebuildPool, rebuildMaxDuration)
	}
	return rebuildSample{latencySample: ls, Rebuild: caughtUp.Sub(began).Seconds()}, nil
}

// waitCaughtUp sets *at and closes done when pool's cursor reaches last,
// or closes done when ctx ends.
func waitCaughtUp(ctx context.Context, db *pgxpool.Pool, pool string, last int64, done chan<- struct{}, at *time.Time) {
	defer close(done)
	for ctx.Err() == nil {
		p, err := pools.Get(ctx, db, pool)
		if err == nil && p.Cursor >= last {
			*at = time.Now()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
