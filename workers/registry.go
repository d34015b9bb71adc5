package workers

import (
	"errors"
	"fmt"

	"github.com/riverqueue/river"
)

// MaxWorkersDefault is how many jobs of one pool a riverbus.Client works at
// the same time when AddOpts.MaxWorkers is zero.
const MaxWorkersDefault = 10

// AddOpts are the optional settings of a handler bound to a pool.
type AddOpts struct {
	// MaxWorkers is the most jobs of the pool a riverbus.Client works at
	// the same time. Zero: MaxWorkersDefault. Pools that share a River
	// queue add up. A queue holding an ordered pool gets twice that many
	// River slots (jobs waiting for their lane hand-off to commit hold
	// one), with handlers still capped at MaxWorkers (docs/operations.md,
	// "Ordered pools").
	MaxWorkers int
}

// Registry holds the handlers of a riverbus.Client, each bound to one pool,
// and the upcasters of the event types they handle (Upcast). Make it with
// NewRegistry, add handlers with Add, and pass it in
// riverbus.Config.Workers.
type Registry struct {
	river    *river.Workers
	pools    map[string]int            // pool → MaxWorkers
	order    []string                  // pools in the order they were added
	versions map[string]*eventVersions // by event type: Upcast, EventVersion
}

// NewRegistry returns an empty set of handlers.
func NewRegistry() *Registry {
	return &Registry{river: river.NewWorkers(), pools: map[string]int{}}
}

// Add binds worker to the pool named by its args' Kind: a riverbus.Client
// started with reg works that pool's River queue with it. It panics when
// the kind is already bound or opts are invalid, as river.AddWorker does;
// AddSafely returns an error instead.
//
//	type BillingArgs struct{ workers.Args }
//	func (BillingArgs) Kind() string { return "billing" } // the pool
//
//	workers.Add(reg, &BillingWorker{}, nil)
func Add[T river.JobArgs](reg *Registry, worker river.Worker[T], opts *AddOpts) {
	if err := AddSafely(reg, worker, opts); err != nil {
		panic(err)
	}
}

// AddSafely is Add returning an error instead of panicking.
func AddSafely[T river.JobArgs](reg *Registry, worker river.Worker[T], opts *AddOpts) error {
	var args T
	return AddArgsSafely(reg, args, worker, opts)
}

// AddArgsSafely binds worker to the pool named by args.Kind(), for args
// whose kind is chosen at run time (webhook deliveries, say): River decodes
// jobs into the zero value of T, so only args' Kind is used.
func AddArgsSafely[T river.JobArgs](reg *Registry, args T, worker river.Worker[T], opts *AddOpts) (err error) {
	if reg == nil {
		return errors.New("riverbus: Registry is nil: make it with workers.NewRegistry")
	}
	pool := args.Kind()
	n := MaxWorkersDefault
	if opts != nil && opts.MaxWorkers != 0 {
		n = opts.MaxWorkers
	}
	if n < 1 || n > river.QueueNumWorkersMax {
		return fmt.Errorf("riverbus: worker of pool %q: MaxWorkers must be between 1 and %d, got %d", pool, river.QueueNumWorkersMax, n)
	}
	if _, dup := reg.pools[pool]; dup {
		return fmt.Errorf("riverbus: pool %q already has a worker", pool)
	}
	defer func() {
		// River's AddWorkerArgs panics on invalid args; it has no safe form.
		if r := recover(); r != nil {
			err = fmt.Errorf("riverbus: worker of pool %q: %v", pool, r)
		}
	}()
	river.AddWorkerArgs(reg.river, args, river.Worker[T](&upcasting[T]{worker: worker, reg: reg}))
	reg.pools[pool] = n
	reg.order = append(reg.order, pool)
	return nil
}

// The methods below are how a riverbus.Client reads the registry when it
// starts: it binds the queues of the pools that have a worker, with their
// MaxWorkers, and gives River the workers (RiverOpts.Workers).

// Pools returns the pools that have a worker, in the order they were added.
func (reg *Registry) Pools() []string { return append([]string(nil), reg.order...) }

// MaxWorkers returns the MaxWorkers of pool's worker, and false when pool
// has none.
func (reg *Registry) MaxWorkers(pool string) (int, bool) {
	n, ok := reg.pools[pool]
	return n, ok
}

// RiverWorkers returns River's set of the registry's workers, for
// RiverOpts.Workers. Add to the registry, not to it.
func (reg *Registry) RiverWorkers() *river.Workers { return reg.river }
