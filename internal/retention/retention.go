package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/migrations"
)

// BatchSizeDefault is how many events one step covers (and with Apply,
// deletes in one transaction) by default: small enough that a step's
// locks, WAL and memory stay small and a pool reset never waits long for
// it, large enough that the steps' overhead is small (docs/operations.md,
// "Event retention").
const BatchSizeDefault = 5000

// BatchSizeMax is the largest batch a step accepts.
const BatchSizeMax = 100_000

// GetPolicy returns the retention policy and where the log begins.
func GetPolicy(ctx context.Context, db database.DB) (bustype.RetentionPolicy, error) {
	var (
		p    bustype.RetentionPolicy
		keep float64
	)
	err := db.QueryRow(ctx, sqlPolicy).Scan(&p.Enabled, &keep, &p.TrimmedThrough, &p.EventsTrimmed, &p.LastTrimmedAt)
	if err != nil {
		return p, fmt.Errorf("read retention policy: %w", err)
	}
	p.Keep = time.Duration(keep * float64(time.Second))
	return p, nil
}

// SetPolicy sets the retention policy: enabled with keep (zero: until
// every pool has passed the events), or disabled. It needs UPDATE on
// riverbus_retention: the owner's.
func SetPolicy(ctx context.Context, db database.DB, enabled bool, keep time.Duration) (bustype.RetentionPolicy, error) {
	if keep < 0 {
		return bustype.RetentionPolicy{}, fmt.Errorf("keep must not be negative, got %s", keep)
	}
	if _, err := db.Exec(ctx, sqlPolicySet, enabled, keep.Seconds()); err != nil {
		return bustype.RetentionPolicy{}, fmt.Errorf("set retention policy: %w", err)
	}
	return GetPolicy(ctx, db)
}

// Holds returns the rules that hold retention back, lowest floor first.
func Holds(ctx context.Context, db database.DB) ([]bustype.RetentionHold, error) {
	rows, err := db.Query(ctx, sqlHolds)
	if err != nil {
		return nil, fmt.Errorf("read what holds retention: %w", err)
	}
	holds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (bustype.RetentionHold, error) {
		var h bustype.RetentionHold
		err := row.Scan(&h.Rule, &h.Holder, &h.Floor)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read what holds retention: %w", err)
	}
	return holds, nil
}

// Opts are the optional settings of Plan and Trim.
type Opts struct {
	// Now is the clock the keep period is measured against. Nil: the
	// database's now().
	Now func() time.Time
	// Keep previews another keep period than the policy's (Plan only; Trim
	// always follows the policy). Nil: the policy's.
	Keep *time.Duration
	// BatchSize is the most events one step covers. Zero:
	// BatchSizeDefault.
	BatchSize int
	// MaxBatches stops after this many steps (Trim resumes where it
	// stopped next time). Zero: no limit.
	MaxBatches int
	// Progress, when set, is called after each step with the plan so far.
	Progress func(bustype.RetentionPlan)
	// Code is the newest schema version the caller's code knows: each of
	// Trim's steps first runs migrations.SQLSchemaCheck with it, and fails
	// with a *migrations.SchemaTooNewError, deleting nothing, when the
	// schema needs newer code. Zero means migrations.Newest().
	Code int
}

func (o *Opts) batchSize() (int, error) {
	n := cmp.Or(o.BatchSize, BatchSizeDefault)
	if n < 1 || n > BatchSizeMax {
		return 0, fmt.Errorf("BatchSize must be between 1 and %d, got %d", BatchSizeMax, n)
	}
	return n, nil
}

// Plan is the dry run: it returns what Trim would delete now, walking the
// log in steps of BatchSize events (bounded memory; a read of the events
// it would delete) and deleting nothing.
func Plan(ctx context.Context, db database.DB, opts *Opts) (*bustype.RetentionPlan, error) {
	return walk(ctx, db, opts, false)
}

// Trim deletes what the policy lets go, in steps of BatchSize events, each
// a transaction of its own that moves the policy's TrimmedThrough: it can
// stop at any point (ctx ends, MaxBatches) and resumes there next time,
// and a cancelled step rolls back whole. It returns what it deleted; with
// no policy set it deletes nothing (StoppedBy RetentionStopDisabled).
// When ctx ends between steps it returns what it did and ctx's error.
func Trim(ctx context.Context, db database.DB, opts *Opts) (*bustype.RetentionPlan, error) {
	return walk(ctx, db, opts, true)
}

func walk(ctx context.Context, db database.DB, opts *Opts, apply bool) (*bustype.RetentionPlan, error) {
	if opts == nil {
		opts = &Opts{}
	}
	size, err := opts.batchSize()
	if err != nil {
		return nil, err
	}
	var keep *float64
	if opts.Keep != nil && !apply {
		if *opts.Keep < 0 {
			return nil, fmt.Errorf("keep must not be negative, got %s", *opts.Keep)
		}
		k := opts.Keep.Seconds()
		keep = &k
	}
	policy, err := GetPolicy(ctx, db)
	if err != nil {
		return nil, err
	}
	plan := &bustype.RetentionPlan{Policy: policy, From: policy.TrimmedThrough, Through: policy.TrimmedThrough, Applied: apply}
	from := policy.TrimmedThrough
	// No policy: nothing to delete, and no need to take the lock that pool
	// resets wait for (the service asks every interval in every process).
	// A policy set meanwhile is applied next time.
	if apply && !policy.Enabled {
		plan.StoppedBy = bustype.RetentionStopDisabled
		if plan.Holds, err = Holds(ctx, db); err != nil {
			return plan, err
		}
		if len(plan.Holds) > 0 {
			plan.Floor = plan.Holds[0].Floor
		}
		return plan, nil
	}
	for {
		var now *time.Time
		if opts.Now != nil {
			t := opts.Now()
			now = &t
		}
		var (
			s         bustype.RetentionPlan
			stop      string
			stepFrom  int64
			oldest    *time.Time
			newest    *time.Time
			stepCount int64
		)
		step := func(db database.DB) error {
			return db.QueryRow(ctx, sqlStep, from, now, keep, size, apply).
				Scan(&stepFrom, &s.Through, &stepCount, &oldest, &newest, &s.Floor, &stop)
		}
		var err error
		if apply {
			// A batch waits for the pool creates and resets in progress
			// (their lock), within LockTimeout.
			err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, migrations.SQLSchemaCheck, cmp.Or(opts.Code, migrations.Newest())); err != nil {
					if tooNew := migrations.AsSchemaTooNew(err); tooNew != nil {
						return tooNew
					}
					return err
				}
				return database.WaitLockTx(ctx, tx, "retention", LockTimeout, func() error { return step(tx) })
			})
		} else {
			err = step(db)
		}
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				return plan, cmp.Or(ctx.Err(), err)
			}
			if tooNew := migrations.AsSchemaTooNew(err); tooNew != nil {
				return plan, tooNew
			}
			return plan, database.WrapOp(fmt.Sprintf("retention step after %d", from), err)
		}
		if plan.Batches == 0 {
			plan.From = stepFrom
		}
		plan.Batches++
		plan.Events += stepCount
		plan.Through = max(plan.Through, s.Through)
		plan.Floor = s.Floor
		plan.StoppedBy = bustype.RetentionStop(stop)
		if oldest != nil && (plan.Oldest == nil || oldest.Before(*plan.Oldest)) {
			plan.Oldest = oldest
		}
		if newest != nil && (plan.Newest == nil || newest.After(*plan.Newest)) {
			plan.Newest = newest
		}
		if opts.Progress != nil {
			opts.Progress(*plan)
		}
		if plan.StoppedBy != bustype.RetentionStopBatch || s.Through <= from {
			break
		}
		from = s.Through
		if opts.MaxBatches > 0 && plan.Batches >= opts.MaxBatches {
			break
		}
		if err := ctx.Err(); err != nil {
			return plan, err
		}
	}
	if apply {
		if plan.Policy, err = GetPolicy(ctx, db); err != nil {
			return plan, err
		}
	}
	if plan.Holds, err = Holds(ctx, db); err != nil {
		return plan, err
	}
	return plan, nil
}

// StartFloor takes the lock that keeps retention from deleting while a
// pool's start is set (migrations 015 and 018) and returns where the log
// begins: the pool create or reset in tx must start at or after it. Call it
// in the transaction that sets the start, before reading anything the
// start depends on. op names the caller ("pool reset") in the
// *database.LockWaitError of a wait that runs out (LockTimeout).
func StartFloor(ctx context.Context, tx pgx.Tx, op string) (int64, error) {
	err := database.WaitLockTx(ctx, tx, op, LockTimeout, func() error {
		_, err := tx.Exec(ctx, SQLStartLock)
		return err
	})
	if err != nil {
		return 0, database.WrapOp(op+": lock out retention", err)
	}
	var floor int64
	if err := tx.QueryRow(ctx, SQLTrimmedThrough).Scan(&floor); err != nil {
		return 0, fmt.Errorf("read where the log begins: %w", err)
	}
	return floor, nil
}

// LockTimeout bounds how long a retention batch waits for the pool creates
// and resets in progress, and they for a batch: each side holds the lock
// for one short transaction.
const LockTimeout = database.LockTimeoutDefault

// TrimmedError is the error for a pool start below where the log begins.
func TrimmedError(what string, seq, trimmedThrough int64) error {
	return fmt.Errorf("%w: %s %d is below where the event log begins: retention removed every event up to %d; start from %d or later, or from beginning",
		bustype.ErrInvalidPool, what, seq, trimmedThrough, trimmedThrough)
}
