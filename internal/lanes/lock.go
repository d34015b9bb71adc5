package lanes

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
)

// MetadataKey is the key of a lane job's metadata that names its lane.
const MetadataKey = "riverbus_lane"

// Of returns the lane of an event with key in a pool ordered by ordering:
// the key itself in a key-ordered pool, the pool's one lane ("") in a
// globally ordered one. Unordered pools have no lanes; Of returns "" for
// them too, and callers check bustype.Ordering.Ordered first.
func Of(ordering bustype.Ordering, key string) string {
	if ordering == bustype.OrderingKey {
		return key
	}
	return ""
}

// Metadata is the metadata of a job in lane.
func Metadata(lane string) []byte {
	b, _ := json.Marshal(map[string]string{MetadataKey: lane})
	return b
}

// Busy takes the locks of lanes of pool (Lock) and returns those that
// have a job in flight or, when blockOnDeadLetter is set (the pool blocks
// on dead letters), a dead letter. tx must hold the locks until its batch
// commits.
func Busy(ctx context.Context, tx pgx.Tx, pool string, lanes []string, blockOnDeadLetter bool) (map[string]bool, error) {
	lanes = slices.Compact(slices.Sorted(slices.Values(lanes)))
	if err := Lock(ctx, tx, pool, lanes); err != nil {
		return nil, err
	}
	// A new statement, after the locks: it sees every release that
	// committed before them.
	rows, err := tx.Query(ctx, sqlBusyLanes, pool, lanes, blockOnDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("read busy lanes: %w", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read busy lanes: %w", err)
	}
	busy := make(map[string]bool, len(held))
	for _, l := range held {
		busy[l] = true
	}
	return busy, nil
}

// Decider decides, job by job in sequence order, whether a new job of a
// lane waits (pending) or may run (available): it waits when its lane
// already has a job in flight, before it in the batch or from earlier
// batches (Busy). A dead letter holds its lane in a pool that blocks on
// dead letters, and not in one that releases.
type Decider struct {
	busy  map[string]bool
	block bool
}

// NewDecider starts from the lanes Busy returned; blockOnDeadLetter as
// for Busy.
func NewDecider(busy map[string]bool, blockOnDeadLetter bool) *Decider {
	d := &Decider{busy: make(map[string]bool, len(busy)), block: blockOnDeadLetter}
	for l := range busy {
		d.busy[l] = true
	}
	return d
}

// Job decides a job of lane: true when it must wait (pending). The lane is
// busy from then on.
func (d *Decider) Job(lane string) (pending bool) {
	pending = d.busy[lane]
	d.busy[lane] = true
	return pending
}

// DeadLetter records a dead letter of lane in the batch (a unit that could
// not become a job): it holds the lane when the pool blocks on dead
// letters.
func (d *Decider) DeadLetter(lane string) {
	if d.block {
		d.busy[lane] = true
	}
}

// Lock takes the exclusive locks of the lanes' buckets: row locks of
// riverbus_lane_lock, which only riverbus_worker may take (an advisory lock
// could be taken and held by any role). First all at once without waiting
// (the common case: no release in progress); when one is busy, it waits for
// them in bucket order.
//
// Releases take their buckets shared in bucket order too (migrations 005,
// 012), but a transaction that releases lanes in two statements (a delete,
// then a completion) can still hold a higher bucket while asking for a
// lower one, and so close a cycle with a waiting batch. The wait is
// therefore bounded by lockWait, well under PostgreSQL's deadlock_timeout:
// on timeout the batch gives back the buckets it got (a savepoint), lets
// the release through and tries again, instead of waiting for the deadlock
// detector to abort one side a second later.
func Lock(ctx context.Context, tx pgx.Tx, pool string, lanes []string) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := sp.QueryRow(ctx, sqlLaneTryLock, pool, lanes).Scan(&ok); err != nil {
		return fmt.Errorf("lock lanes: %w", err)
	}
	if ok {
		return sp.Commit(ctx) // RELEASE SAVEPOINT keeps the locks
	}
	if err := sp.Rollback(ctx); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		var prev, set string
		if err := sp.QueryRow(ctx, sqlSetLockTimeout, fmt.Sprintf("%dms", lockWait.Milliseconds())).Scan(&prev, &set); err != nil {
			return fmt.Errorf("lock lanes: %w", err)
		}
		if _, err = sp.Exec(ctx, sqlLaneLock, pool, lanes); err == nil {
			if err := sp.QueryRow(ctx, sqlSetLockTimeout, prev).Scan(&prev, &set); err != nil {
				return fmt.Errorf("lock lanes: %w", err)
			}
			return sp.Commit(ctx)
		}
		if !database.IsCode(err, pgerrcode.LockNotAvailable) {
			return fmt.Errorf("lock lanes: %w", err)
		}
		// Rolling back to the savepoint frees the buckets taken so far and
		// restores lock_timeout.
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.Int64N(int64(min(attempt, 10)) * int64(5*time.Millisecond)))):
		}
	}
}

// lockWait bounds a batch's wait for one lane bucket; it must stay well
// below PostgreSQL's deadlock_timeout (1 s by default).
const lockWait = 100 * time.Millisecond
