package deadletters

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/redact"
	"github.com/riverbus/riverbus/internal/riversql"
)

// List returns the dead letters params selects, in job id order. A Limit
// out of range gives an error that names it.
func List(ctx context.Context, db database.DB, params bustype.DeadLetterListParams) ([]bustype.DeadLetter, error) {
	limit := params.Limit
	switch {
	case limit == 0:
		limit = bustype.DeadLetterListLimitDefault
	case limit < 0 || limit > bustype.DeadLetterListLimitMax:
		return nil, fmt.Errorf("Limit must be between 1 and %d, got %d", bustype.DeadLetterListLimitMax, limit)
	}
	rows, err := db.Query(ctx, sqlDeadLetterList, params.Pool, params.AfterJobID, limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

func scanDeadLetter(row pgx.CollectableRow) (bustype.DeadLetter, error) {
	var (
		d        bustype.DeadLetter
		seq      *int64
		errsJSON []byte
		state    *string
	)
	err := row.Scan(&d.JobID, &d.Pool, &d.Queue, &seq, &d.EventType, &d.EventKey, &d.Late,
		&d.Attempt, &d.MaxAttempts, &d.Priority, &d.LastError, &errsJSON, &d.DiscardedAt, &state, &d.Args)
	if err != nil {
		return d, err
	}
	if seq != nil {
		d.GlobalSequence = *seq
	}
	if state != nil {
		d.JobExists = true
		d.JobState = bustype.JobState(*state)
	}
	// errors is whatever River stored; an unexpected shape leaves Errors
	// empty rather than failing the list.
	_ = json.Unmarshal(errsJSON, &d.Errors)
	// A handler's error may quote a URL with credentials (Go's
	// *url.Error does); webhooks mask theirs, others may not.
	d.LastError = redact.Text(d.LastError)
	for i := range d.Errors {
		d.Errors[i].Error = redact.Text(d.Errors[i].Error)
	}
	return d, nil
}

// OfReplay returns how many dead letters the replay of pool that a reset
// started has made so far (those with a job id above jobsAfter for events in
// (after, through], see pools.Replay) and the first limit of them, by
// sequence.
func OfReplay(ctx context.Context, db database.DB, pool string, jobsAfter, after, through int64, limit int) (int64, []bustype.DeadLetter, error) {
	var n int64
	if err := db.QueryRow(ctx, sqlDeadLetterReplayCount, pool, jobsAfter, after, through).Scan(&n); err != nil {
		return 0, nil, fmt.Errorf("count the replay's dead letters: %w", err)
	}
	if n == 0 || limit <= 0 {
		return n, nil, nil
	}
	rows, err := db.Query(ctx, sqlDeadLetterReplay, pool, jobsAfter, after, through, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("list the replay's dead letters: %w", err)
	}
	dls, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return 0, nil, fmt.Errorf("list the replay's dead letters: %w", err)
	}
	return n, dls, nil
}

// Get returns the dead letter of job jobID. A job id that is not a dead
// letter gives an error wrapping bustype.ErrDeadLetterNotFound.
func Get(ctx context.Context, db database.DB, jobID int64) (*bustype.DeadLetter, error) {
	dls, err := List(ctx, db, bustype.DeadLetterListParams{AfterJobID: jobID - 1, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(dls) == 0 || dls[0].JobID != jobID {
		return nil, fmt.Errorf("dead letter %d: %w", jobID, bustype.ErrDeadLetterNotFound)
	}
	return &dls[0], nil
}

// Retry puts the dead letter of job jobID back to work and removes
// it from riverbus_dead_letter, in one transaction: if the river_job row is
// still there and discarded it is made available again as River's JobRetry
// would; if River's cleaner deleted it, a new job is inserted. A dead letter
// of an event the fan-out could not turn into a job carries a stub instead
// of the envelope: the envelope is rebuilt from the event's row in
// riverbus_event (repair it first), and if it still cannot be encoded the
// dead letter stays, with an error wrapping bustype.ErrUndeliverable and
// the Action bustype.RetryUndeliverable. River producers of the job's queue are notified on
// commit. No River client is needed. A job id that is not a dead letter
// gives an error wrapping bustype.ErrDeadLetterNotFound.
//
// A retried job below a pool's stored checkpoint does not pull the
// checkpoint back (see package checkpoint).
func Retry(ctx context.Context, db database.DB, jobID int64) (bustype.DeadLetterRetryResult, error) {
	var out []bustype.DeadLetterRetryResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		out, err = retry(ctx, tx, sqlJobLockDeadOne, sqlDeadLetterLockOne, jobID)
		return err
	})
	if err != nil {
		return bustype.DeadLetterRetryResult{}, fmt.Errorf("retry dead letter %d: %w", jobID, err)
	}
	if len(out) == 0 {
		return bustype.DeadLetterRetryResult{}, fmt.Errorf("retry dead letter %d: %w", jobID, bustype.ErrDeadLetterNotFound)
	}
	if out[0].Action == bustype.RetryUndeliverable {
		return out[0], fmt.Errorf("retry dead letter %d: %w: %s", jobID, bustype.ErrUndeliverable, out[0].Reason)
	}
	return out[0], nil
}

// RetryPool retries every dead letter of pool as Retry does, in one transaction, so that River works them again in global
// sequence order (dead letters without a sequence last, by job id). It
// returns what it did with each, in that order; none for a pool without dead
// letters.
func RetryPool(ctx context.Context, db database.DB, pool string) ([]bustype.DeadLetterRetryResult, error) {
	var out []bustype.DeadLetterRetryResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		out, err = retry(ctx, tx, sqlJobLockDeadPool, sqlDeadLetterLockPool, pool)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("retry dead letters of pool %q: %w", pool, err)
	}
	return out, nil
}

// retry retries the dead letters that lockQuery (job_id, queue) selects and
// locks, in the order it returns them, after jobLockQuery (id, state, queue)
// locked their river_job rows that exist.
func retry(ctx context.Context, tx pgx.Tx, jobLockQuery, lockQuery string, arg any) (out []bustype.DeadLetterRetryResult, err error) {
	// Job rows first (see the queries): from here on none can disappear.
	rows, err := tx.Query(ctx, jobLockQuery, arg)
	if err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}
	type job struct {
		state rivertype.JobState
		queue string
	}
	jobs := map[int64]job{}
	var (
		id           int64
		state, queue string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &queue}, func() error {
		jobs[id] = job{rivertype.JobState(state), queue}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}

	rows, err = tx.Query(ctx, lockQuery, arg)
	if err != nil {
		return nil, fmt.Errorf("lock dead letters: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deadRef, error) {
		var d deadRef
		err := row.Scan(&d.id, &d.queue)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("lock dead letters: %w", err)
	}
	// A dead letter whose job row exists but was not locked above was
	// written since (its job was discarded meanwhile): left for the next
	// retry rather than taken as one River's cleaner deleted.
	var unlocked, existing []int64
	for _, d := range all {
		if _, locked := jobs[d.id]; !locked {
			unlocked = append(unlocked, d.id)
		}
	}
	if len(unlocked) > 0 {
		if err := tx.QueryRow(ctx, sqlJobExisting, unlocked).Scan(&existing); err != nil {
			return nil, fmt.Errorf("lock dead letters: %w", err)
		}
	}
	var deads []deadRef
	for _, d := range all {
		if !slices.Contains(existing, d.id) {
			deads = append(deads, d)
		}
	}
	stay, err := rebuildUndeliverable(ctx, tx, deadIDs(deads))
	if err != nil {
		return nil, err
	}
	if len(stay) > 0 {
		deads = slices.DeleteFunc(deads, func(d deadRef) bool { _, ok := stay[d.id]; return ok })
		defer func() {
			// The ones left, in job id order, after the others.
			for _, id := range slices.Sorted(maps.Keys(stay)) {
				out = append(out, bustype.DeadLetterRetryResult{DeadJobID: id, JobID: id, Action: bustype.RetryUndeliverable, Reason: stay[id]})
			}
		}()
	}
	if len(deads) == 0 {
		return nil, nil
	}
	ids := deadIDs(deads)

	out = make([]bustype.DeadLetterRetryResult, len(deads))
	var (
		requeueIDs, reinsertIDs     []int64
		requeueRanks, reinsertRanks []int32 // rank: position in the order to work
		queues                      []string
	)
	for i, d := range deads {
		out[i] = bustype.DeadLetterRetryResult{DeadJobID: d.id, JobID: d.id}
		j, exists := jobs[d.id]
		switch {
		case !exists:
			out[i].Action = bustype.RetryReinserted
			reinsertIDs = append(reinsertIDs, d.id)
			reinsertRanks = append(reinsertRanks, int32(i))
			queues = append(queues, d.queue)
		case j.state == rivertype.JobStateDiscarded:
			out[i].Action = bustype.RetryRequeued
			requeueIDs = append(requeueIDs, d.id)
			requeueRanks = append(requeueRanks, int32(i))
			queues = append(queues, j.queue)
		default:
			out[i].Action = bustype.RetryAlreadyRetried
		}
	}

	if len(requeueIDs) > 0 {
		tag, err := tx.Exec(ctx, riversql.JobRetryDiscarded, requeueIDs, requeueRanks)
		if err != nil {
			return nil, fmt.Errorf("requeue jobs: %w", err)
		}
		if tag.RowsAffected() != int64(len(requeueIDs)) {
			return nil, fmt.Errorf("requeue jobs: %d of %d updated", tag.RowsAffected(), len(requeueIDs))
		}
	}
	if len(reinsertIDs) > 0 {
		rows, err := tx.Query(ctx, sqlJobReinsert, reinsertIDs, reinsertRanks)
		if err != nil {
			return nil, fmt.Errorf("reinsert jobs: %w", err)
		}
		newIDs := make(map[int64]int64, len(reinsertIDs))
		var newID, oldID int64
		if _, err := pgx.ForEachRow(rows, []any{&newID, &oldID}, func() error {
			newIDs[oldID] = newID
			return nil
		}); err != nil {
			return nil, fmt.Errorf("reinsert jobs: %w", err)
		}
		for i := range out {
			if out[i].Action == bustype.RetryReinserted {
				n, ok := newIDs[out[i].DeadJobID]
				if !ok {
					return nil, fmt.Errorf("reinsert jobs: no job inserted for dead letter %d", out[i].DeadJobID)
				}
				out[i].JobID = n
			}
		}
	}
	if _, err := tx.Exec(ctx, sqlDeadLetterDeleteMany, ids); err != nil {
		return nil, fmt.Errorf("delete dead letters: %w", err)
	}
	// Jobs of ordered pools go back in line in their lane.
	retried := make([]int64, 0, len(out))
	for _, r := range out {
		if r.Action != bustype.RetryAlreadyRetried {
			retried = append(retried, r.JobID)
		}
	}
	rows, err = tx.Query(ctx, sqlLanePark, retried)
	if err != nil {
		return nil, fmt.Errorf("park ordered jobs: %w", err)
	}
	kinds, lanes, err := collectLanes(rows)
	if err != nil {
		return nil, fmt.Errorf("park ordered jobs: %w", err)
	}
	if len(kinds) > 0 {
		if _, err := tx.Exec(ctx, sqlLaneRelease, kinds, lanes); err != nil {
			return nil, fmt.Errorf("release ordered lanes: %w", err)
		}
	}
	if len(queues) > 0 {
		slices.Sort(queues)
		if _, err := tx.Exec(ctx, riversql.NotifyInsertQueues, slices.Compact(queues)); err != nil {
			return nil, fmt.Errorf("notify River: %w", err)
		}
	}
	return out, nil
}

// Purge gives up on the dead letter of job jobID: it deletes it and, if it
// is still there and discarded, its river_job row. A job id that is not a
// dead letter gives an error wrapping bustype.ErrDeadLetterNotFound.
func Purge(ctx context.Context, db database.DB, jobID int64) error {
	n, err := purge(ctx, db, sqlJobLockDeadOne, sqlDeadLetterPurgeOne, jobID)
	if err != nil {
		return fmt.Errorf("purge dead letter %d: %w", jobID, err)
	}
	if n == 0 {
		return fmt.Errorf("purge dead letter %d: %w", jobID, bustype.ErrDeadLetterNotFound)
	}
	return nil
}

// purge locks the river_job rows of the dead letters to purge (jobLockQuery,
// first, as retry does), runs a purge query and releases the ordered lanes
// the purged dead letters held (a pool that blocks on dead letters waits for
// this).
func purge(ctx context.Context, db database.DB, jobLockQuery, query string, arg any) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, jobLockQuery, arg); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, query, arg)
		if err != nil {
			return err
		}
		var kinds, lanes []string
		var kind string
		var lane *string
		_, err = pgx.ForEachRow(rows, []any{&kind, &lane}, func() error {
			n++
			if lane != nil {
				kinds, lanes = append(kinds, kind), append(lanes, *lane)
			}
			return nil
		})
		if err != nil || len(kinds) == 0 {
			return err
		}
		_, err = tx.Exec(ctx, sqlLaneRelease, kinds, lanes)
		return err
	})
	return n, err
}

// deadRef is a dead letter being retried: its job id and queue.
type deadRef struct {
	id    int64
	queue string
}

func deadIDs(ds []deadRef) []int64 {
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.id
	}
	return ids
}

func collectLanes(rows pgx.Rows) (kinds, lanes []string, err error) {
	seen := map[[2]string]bool{}
	var kind, lane string
	_, err = pgx.ForEachRow(rows, []any{&kind, &lane}, func() error {
		if k := [2]string{kind, lane}; !seen[k] {
			seen[k] = true
			kinds, lanes = append(kinds, kind), append(lanes, lane)
		}
		return nil
	})
	return kinds, lanes, err
}

// PurgePool purges every dead letter of pool as Purge does and returns how
// many there were.
func PurgePool(ctx context.Context, db database.DB, pool string) (int, error) {
	n, err := purge(ctx, db, sqlJobLockDeadPool, sqlDeadLetterPurgePool, pool)
	if err != nil {
		return 0, fmt.Errorf("purge dead letters of pool %q: %w", pool, err)
	}
	return n, nil
}
