package bench

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverbus/riverbus/bustype"
)

// smallArgs are no-op job args of a few bytes, decoded by the same worker
// as benchArgs (the missing envelope fields stay zero).
type smallArgs struct{}

func (smallArgs) Kind() string { return benchKind }

// runDrainArgs measures what an event envelope in args costs River itself:
// raw River draining jobs that carry an envelope (as every riverbus job
// does) against raw River draining the same number of jobs with args of a
// few bytes (the drain scenario's raw side, River at its best), same
// client settings. Every state change of a job writes a new row version,
// and River's GIN index on args gets new entries for each, so the args'
// size is part of what a drain costs; riverbus's migration 013 keeps its
// own jobs out of that index.
func runDrainArgs(ctx context.Context, e *env) ([]Result, error) {
	n := e.Scaled(drainJobs, 50)
	side := func(small bool) func(ctx context.Context) (drained, error) {
		return func(ctx context.Context) (drained, error) { return rawDrain(ctx, e, n, small) }
	}
	envelope, small, err := measurePair(ctx, e, "drain-args", side(false), side(true))
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("here RIVERBUS is raw River draining %d jobs whose args are an event envelope (≈ 297 B, as riverbus's jobs) and RAW RIVER the same with args of a few bytes (River at its best); same worker settings as drain", n)
	return drainRows("drain-args", envelope, small, nil, note), nil
}

// rawDrain inserts n jobs with raw River into a fresh database, event
// envelopes as args or, with small, args of a few bytes, and returns how
// fast a River client with riverbus's worker settings completes them.
func rawDrain(ctx context.Context, e *env, n int, small bool) (drained, error) {
	d, err := e.newDatabase(ctx, schemaRiver)
	if err != nil {
		return drained{}, err
	}
	defer d.Drop()
	tracked := d.trackStatements(ctx)
	db, err := d.Connect(ctx, workerConns)
	if err != nil {
		return drained{}, err
	}
	defer db.Close()
	client, err := river.NewClient(riverpgxv5.New(db), &river.Config{Logger: e.Quiet})
	if err != nil {
		return drained{}, err
	}
	batches := rawBatches(rawEvents(n), poolNames(1))
	if small {
		opts := &river.InsertOpts{Queue: bustype.DefaultQueue(benchKind), MaxAttempts: bustype.MaxAttemptsDefault, Priority: bustype.PriorityDefault}
		for _, batch := range batches {
			for i := range batch {
				batch[i] = river.InsertManyParams{Args: smallArgs{}, InsertOpts: opts}
			}
		}
	}
	if err := insertRaw(ctx, client, db, batches, 1); err != nil {
		return drained{}, err
	}
	if err := d.Settle(ctx, db); err != nil {
		return drained{}, err
	}
	var stats *statements
	if tracked {
		stats = &statements{db: db}
	}
	return drain(ctx, e, db, n, false, stats)
}
