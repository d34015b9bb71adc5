package riverbus

import (
	"errors"
	"fmt"

	"github.com/riverqueue/river"
)

// MaxWorkersDefault is how many jobs of one pool a Client works at the same
// time when WorkerOpts.MaxWorkers is zero.
const MaxWorkersDefault = 10

// WorkerOpts are the optional settings of a handler bound to a pool.
type WorkerOpts struct {
	// MaxWorkers is the most jobs of the pool this Client works at the same
	// time. Zero: MaxWorkersDefault. Pools that share a River queue add up.
	// A queue holding an ordered pool gets twice that many River slots
	// (jobs waiting for their lane hand-off to commit hold one), with
	// handlers still capped at MaxWorkers (docs/operations.md, "Ordered pools").
	MaxWorkers int
}

// Workers holds the handlers of a Client, each bound to one pool. Make it
// with NewWorkers, add handlers with AddWorker, and pass it in
// Config.Workers.
type Workers struct {
	river *river.Workers
	pools map[string]int // pool → MaxWorkers
	order []string       // pools in the order they were added
}

// NewWorkers returns an empty set of handlers.
func NewWorkers() *Workers {
	return &Workers{river: river.NewWorkers(), pools: map[string]int{}}
}

// AddWorker binds worker to the pool named by its args' Kind: the Client
// works that pool's River queue with it. It panics when the kind is already
// bound or opts are invalid, as river.AddWorker does; AddWorkerSafely
// returns an error instead.
//
//	type BillingArgs struct{ workers.Args }
//	func (BillingArgs) Kind() string { return "billing" } // the pool
//
//	riverbus.AddWorker(ws, &BillingWorker{}, nil)
func AddWorker[T river.JobArgs](w *Workers, worker river.Worker[T], opts *WorkerOpts) {
	if err := AddWorkerSafely(w, worker, opts); err != nil {
		panic(err)
	}
}

// AddWorkerSafely is AddWorker returning an error instead of panicking.
func AddWorkerSafely[T river.JobArgs](w *Workers, worker river.Worker[T], opts *WorkerOpts) error {
	var args T
	return AddWorkerArgsSafely(w, args, worker, opts)
}

// AddWorkerArgsSafely binds worker to the pool named by args.Kind(), for
// args whose kind is chosen at run time (webhook deliveries, say): River
// decodes jobs into the zero value of T, so only args' Kind is used.
func AddWorkerArgsSafely[T river.JobArgs](w *Workers, args T, worker river.Worker[T], opts *WorkerOpts) (err error) {
	if w == nil {
		return errors.New("riverbus: Workers is nil: make it with NewWorkers")
	}
	pool := args.Kind()
	n := MaxWorkersDefault
	if opts != nil && opts.MaxWorkers != 0 {
		n = opts.MaxWorkers
	}
	if n < 1 || n > river.QueueNumWorkersMax {
		return fmt.Errorf("riverbus: worker of pool %q: MaxWorkers must be between 1 and %d, got %d", pool, river.QueueNumWorkersMax, n)
	}
	if _, dup := w.pools[pool]; dup {
		return fmt.Errorf("riverbus: pool %q already has a worker", pool)
	}
	defer func() {
		// River's AddWorkerArgs panics on invalid args; it has no safe form.
		if r := recover(); r != nil {
			err = fmt.Errorf("riverbus: worker of pool %q: %v", pool, r)
		}
	}()
	river.AddWorkerArgs(w.river, args, worker)
	w.pools[pool] = n
	w.order = append(w.order, pool)
	return nil
}

// Pools returns the pools that have a worker, in the order they were added.
func (w *Workers) Pools() []string { return append([]string(nil), w.order...) }
