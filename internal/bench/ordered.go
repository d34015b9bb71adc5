package bench

import (
	"context"
	"fmt"

	"github.com/riverbus/riverbus/bustype"
)

// The events of ordered-vs-unordered: orderedEvents over orderedKeys keys
// taking turns.
const (
	orderedEvents = 10_000
	orderedKeys   = 200
)

// runOrdered: a key-ordered pool against the same pool unordered: how fast
// the fan-out creates the jobs, and how fast River completes them, with
// orderedEvents events over orderedKeys keys.
//
// It reports itself skipped while bustype.PoolParams has no Ordering field.
// The field is set by reflection, so this package builds whether or not
// ordered pools exist.
func runOrdered(ctx context.Context, e *env) ([]Result, error) {
	const name = "ordered-vs-unordered"
	ordered := func(p *bustype.PoolParams) { p.Ordering = bustype.OrderingKey }
	unordered := func(p *bustype.PoolParams) { p.Ordering = bustype.OrderingNone }
	n, keys := e.Scaled(orderedEvents, 50), e.Scaled(orderedKeys, 10)
	type sample struct{ Fan, Drain float64 }
	side := func(opt func(*bustype.PoolParams)) func(ctx context.Context) (sample, error) {
		return func(ctx context.Context) (sample, error) {
			fan, dr, err := fanOutAndDrain(ctx, e, false, n, keys, opt)
			return sample{fan, dr.Rate}, err
		}
	}
	os, us, err := measurePair(ctx, e, name, side(ordered), side(unordered))
	if err != nil {
		return nil, err
	}
	fanOf := func(x sample) float64 { return x.Fan }
	drainOf := func(x sample) float64 { return x.Drain }
	note := fmt.Sprintf("here RIVERBUS is a pool with Ordering \"key\" and RAW RIVER the same pool unordered (not raw River); %d events over %d keys; drain as in the drain scenario", n, keys)
	return []Result{
		paired(name, "fan-out throughput", "jobs/s", pick(os, fanOf), pick(us, fanOf), nil, note),
		paired(name, "drain throughput", "jobs/s", pick(os, drainOf), pick(us, drainOf), &Target{Of: "ratio", Op: ">=", Value: 0.5}, note),
	}, nil
}

// orderingOption returns an option that sets PoolParams.Ordering to v, if
// the field exists.
