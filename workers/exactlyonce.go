package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// DB is what RunExactlyOnce and RiverOpts need from a database handle:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it. Given a pgx.Tx, the
// functions that need a transaction use a savepoint inside it, and nothing is
// final until the caller commits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrJobNotRunning is returned by RunExactlyOnce when the job is no longer
// running the attempt the worker was given: another worker has it (after a
// rescue), or it was cancelled, deleted or finished otherwise. The function
// was not run.
var ErrJobNotRunning = errors.New("job is not running this attempt")

// CompleteTx marks job completed as part of tx: if tx rolls back, so does
// the completion. It wraps river.JobCompleteTx for the pgx driver and must be
// called with the context River passed to Work. After tx commits the worker
// should return nil; an error it returns instead has no effect, the job stays
// completed.
func CompleteTx[TArgs river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[TArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job %d: %w", job.ID, err)
	}
	return nil
}

// RunExactlyOnce runs fn and completes job in one transaction begun on db
// (normally the *pgxpool.Pool of the River client), then commits. Call it
// from Work with Work's context and return its error:
//
//	func (w *BillingWorker) Work(ctx context.Context, job *river.Job[BillingArgs]) error {
//		return workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "UPDATE revenue SET cents = cents + $1", cents)
//			return err
//		})
//	}
//
// Whatever fn writes through tx is applied exactly once per job:
//   - fn fails, or the process dies before the commit: nothing is applied,
//     the job is still running, and River retries it (or rescues it);
//   - the commit succeeds: the effect and the completion are both durable;
//     River finds the job completed and never runs it again, even if the
//     process dies before River itself records the outcome.
//
// The job row is locked first. When it is already completed (RunExactlyOnce
// ran for this job before, e.g. twice in one Work), fn is not run and the
// result is nil. When it is in any other state than running, or running
// another attempt (a rescued job now held by another worker), fn is not run
// and the result wraps ErrJobNotRunning.
//
// Only effects in this database and through tx are covered: calls to other
// systems made by fn can still happen more than once.
//
// It guards one job, not one event. A pool reset (`riverbus pool reset`,
// Client.PoolReset) makes a new job for every event it replays, and a
// second pool whose handler writes the same table has jobs of its own: fn
// runs again for each, with the same event. A handler whose write refuses
// an event it has applied (an INSERT into a table keyed by the event id,
// say) fails every replayed job, and each becomes a dead letter
// (`pool reset --wait` lists them). Write per event instead (an upsert
// keyed by the event id or sequence, or skip an event already applied), or
// clear what the replay rebuilds before the reset.
//
// In a test with River's rivertest.Worker, which inserts and works the job
// inside the test's transaction, give the handler that transaction as its
// db (DB is what both a *pgxpool.Pool and a pgx.Tx are): RunExactlyOnce
// then works in a savepoint of it and the job ends completed. Given the
// pool, it cannot see the uncommitted job and returns ErrJobNotRunning
// ("job 1 no longer exists"). riverbustest.StartClient runs handlers as
// production does, through a pool.
func RunExactlyOnce[TArgs river.JobArgs](ctx context.Context, db DB, job *river.Job[TArgs], fn func(ctx context.Context, tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var (
			state   rivertype.JobState
			attempt int
		)
		err := tx.QueryRow(ctx, sqlJobLockForWork, job.ID).Scan(&state, &attempt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: job %d no longer exists", ErrJobNotRunning, job.ID)
		}
		if err != nil {
			return fmt.Errorf("lock job %d: %w", job.ID, err)
		}
		if state == rivertype.JobStateCompleted {
			return errAlreadyCompleted
		}
		if state != rivertype.JobStateRunning || attempt != job.Attempt {
			return fmt.Errorf("%w: job %d is %s at attempt %d, this worker has attempt %d", ErrJobNotRunning, job.ID, state, attempt, job.Attempt)
		}
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return completeWaitingForLanes(ctx, tx, job)
	})
	if errors.Is(err, errAlreadyCompleted) {
		return nil
	}
	return err
}

// completeWaitingForLanes completes job in tx, in a savepoint it tries
// again for as long as ctx (the job's) allows when the completion's lane
// release gives up waiting for the lane locks (SQLSTATE 55P03). In a
// key-ordered pool, completing a job releases its lane, which waits for
// the pool's fan-out batch deciding those lanes (riverbus_release_lanes,
// with a lock_timeout of its own): a batch of big events holds them for
// seconds, and one try then failed the attempt, rolling back the work fn
// had done and spending an attempt on nothing but the wait (a pool with
// one attempt made it a dead letter). The job's row stays locked by tx
// meanwhile, so nothing else can take the job.
func completeWaitingForLanes[TArgs river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[TArgs]) error {
	for {
		err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return CompleteTx(ctx, sp, job) })
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.LockNotAvailable {
			return err
		}
		// Not at once: a lock_timeout shorter than the function's, a
		// DBA's, would make this a busy loop.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errAlreadyCompleted rolls RunExactlyOnce's transaction back when the job
// was completed before; it never reaches the caller.
var errAlreadyCompleted = errors.New("job already completed")

// sqlJobLockForWork locks a job for RunExactlyOnce. It is the package's
// only query.
const sqlJobLockForWork = `SELECT state::text, attempt FROM river_job WHERE id = $1 FOR UPDATE`
