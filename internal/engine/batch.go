package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/outbox"
)

// jobArgs is what a pool job carries: the event envelope, flagged late when
// it committed after its gap timed out. workers.Args decodes it.
type jobArgs struct {
	kind string
	outbox.Event
	Late bool `json:"late,omitempty"`
}

func (a jobArgs) Kind() string { return a.kind }

type lockedPool struct {
	name         string
	queue        string
	eventTypes   []string
	tags         []string
	maxAttempts  int16
	priority     int16
	startAfter   int64
	cursor       int64
	ordering     bustype.Ordering
	onDeadLetter bustype.DeadLetterPolicy
	grouping     bustype.Grouping
}

// event is an event as the fan-out reads it: the envelope and its writer's
// transaction id.
type event struct {
	outbox.Event
	txid string
}

// unit is one job to insert: one event, or one transaction's group.
type unit struct {
	args  river.JobArgs
	first int64 // global sequence of its (first) event
	lane  string
	late  bool
}

// FanOutPool runs one batch for pool name in one transaction: lock the pool
// row (skipping it when another instance has it), turn the events in
// (cursor, horizon] into jobs, deliver late events, move the cursor, commit.
// full reports that the batch was full, so more may be waiting.
func (f *Fanout) FanOutPool(ctx context.Context, name string) (fanout.BatchResult, bool, error) {
	if res, full, handled, err := f.fanOutPlain(ctx, name); err != nil {
		return fanout.BatchResult{}, false, err
	} else if handled {
		f.batchDone(res)
		return res, full, nil
	}
	res := fanout.BatchResult{Pool: name}
	full := false
	var undeliverable []*job
	err := pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		// One round trip: settings, the pool row, the horizon (read after
		// the lock, so no older than the pool's cursor).
		p := lockedPool{name: name}
		var horizon int64
		var anySkipped bool
		b := &pgx.Batch{}
		b.Queue(sqlTxSettings)
		b.Queue(sqlPoolLock, name)
		b.Queue(sqlHorizonAndSkipped)
		br := tx.SendBatch(ctx, b)
		_, err := br.Exec()
		if err == nil {
			err = br.QueryRow().Scan(&p.queue, &p.eventTypes, &p.tags, &p.maxAttempts,
				&p.priority, &p.startAfter, &p.cursor, &p.ordering, &p.onDeadLetter, &p.grouping)
		}
		locked := err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		if err == nil {
			err = br.QueryRow().Scan(&horizon, &anySkipped)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("lock pool: %w", err)
		}
		if !locked {
			return nil // paused, deleted, or another instance has it now
		}
		f.mu.Lock()
		f.plain[name] = plainKindOf(&p)
		f.mu.Unlock()

		var units []unit
		newCursor := p.cursor
		lateCount := 0
		if anySkipped && p.cursor > p.startAfter {
			rows, err := tx.Query(ctx, sqlLateEvents, name, p.cursor, p.startAfter)
			if err != nil {
				return fmt.Errorf("read late events: %w", err)
			}
			late, err := pgx.CollectRows(rows, scanEvent)
			if err != nil {
				return fmt.Errorf("read late events: %w", err)
			}
			if len(late) > 0 {
				// A late event at or below the pool's start point (a reset
				// forward past it, say) is not the pool's: it is recorded as
				// handled, not delivered.
				var start int64
				if err := tx.QueryRow(ctx, sqlPoolGroupFloor, name).Scan(&start); err != nil {
					return fmt.Errorf("read start point: %w", err)
				}
				seqs := make([]int64, len(late))
				var matching []event
				for i, e := range late {
					seqs[i] = e.GlobalSequence
					if e.GlobalSequence > start && p.matches(e.Event) {
						matching = append(matching, e)
					}
				}
				if _, err := tx.Exec(ctx, sqlPoolLateRecord, name, seqs); err != nil {
					return fmt.Errorf("record late events: %w", err)
				}
				lateUnits, err := f.units(ctx, tx, &p, matching, true)
				if err != nil {
					return err
				}
				units = append(units, lateUnits...)
				lateCount = len(matching)
			}
		}
		if horizon > p.cursor {
			var rows pgx.Rows
			if len(p.eventTypes) > 0 {
				rows, err = tx.Query(ctx, sqlEventsOfTypes, p.cursor, horizon, p.tags, f.cfg.BatchSize, p.eventTypes)
			} else {
				rows, err = tx.Query(ctx, sqlEventsAll, p.cursor, horizon, p.tags, f.cfg.BatchSize)
			}
			if err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			events, err := pgx.CollectRows(rows, scanEvent)
			if err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			full = len(events) == f.cfg.BatchSize
			newCursor = horizon
			if full {
				newCursor = events[len(events)-1].GlobalSequence
			}
			normal, err := f.units(ctx, tx, &p, events, false)
			if err != nil {
				return err
			}
			units = append(units, normal...)
			if anySkipped {
				// Only the skipped sequences this batch read: one that
				// commits after the read above is left to the late path.
				read := make([]int64, len(events))
				for i, e := range events {
					read[i] = e.GlobalSequence
				}
				if _, err := tx.Exec(ctx, sqlPoolLateRecordRange, name, read); err != nil {
					return fmt.Errorf("record skipped sequences passed: %w", err)
				}
			}
		}

		if newCursor == p.cursor && len(units) == 0 {
			return nil
		}
		var dead []*job
		if len(units) > 0 {
			if dead, err = f.insertJobs(ctx, tx, &p, units); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, sqlPoolAdvance, name, newCursor, len(units), lateCount); err != nil {
			return fmt.Errorf("advance cursor: %w", err)
		}
		undeliverable = dead
		res.Jobs, res.Late, res.Cursor = len(units), lateCount, newCursor
		return nil
	})
	if err != nil {
		return fanout.BatchResult{}, false, fmt.Errorf("fan out pool %q: %w", name, err)
	}
	res.Undeliverable = len(undeliverable)
	for _, j := range undeliverable {
		f.logger.Warn("event cannot become a job; kept as a dead letter of the pool",
			"pool", name, "global_sequence", j.u.first, "reason", j.reason)
	}
	f.batchDone(res)
	return res, full, nil
}

// batchDone counts a committed batch and reports it.
func (f *Fanout) batchDone(res fanout.BatchResult) {
	if res.Jobs > 0 || res.Late > 0 {
		f.mu.Lock()
		f.stats.EventsFannedOut[res.Pool] += int64(res.Jobs)
		f.stats.LateDelivered[res.Pool] += int64(res.Late)
		if res.Undeliverable > 0 {
			f.stats.Undeliverable[res.Pool] += int64(res.Undeliverable)
		}
		f.mu.Unlock()
		if res.Late > 0 {
			f.logger.Warn("delivered late events", "pool", res.Pool, "count", res.Late)
		}
		if f.cfg.OnBatch != nil {
			f.cfg.OnBatch(res)
		}
	}
}

// units turns matching events into jobs: one per event, or, for a grouped
// pool, one per transaction group (group.go).
func (f *Fanout) units(ctx context.Context, tx pgx.Tx, p *lockedPool, events []event, late bool) ([]unit, error) {
	if p.grouping == bustype.GroupTransaction {
		return f.groupUnits(ctx, tx, p, events, late)
	}
	out := make([]unit, len(events))
	for i, e := range events {
		out[i] = unit{args: jobArgs{kind: p.name, Event: e.Event, Late: late}, first: e.GlobalSequence, lane: p.lane(e.Key), late: late}
	}
	return out, nil
}

// lane is the ordering lane of an event key in the pool: the key itself in a
// key-ordered pool, one lane for a globally ordered one, none otherwise.
func (p *lockedPool) lane(key string) string {
	switch p.ordering {
	case bustype.OrderingKey:
		return key
	case bustype.OrderingGlobal:
		return ""
	}
	return ""
}

// lockLanes takes the exclusive locks of the lanes' buckets: row locks of
// riverbus_lane_lock, which only riverbus_worker may take (an advisory lock
// could be taken and held by any role). First all at once without waiting
// (the common case: no release in progress); when one is busy, it waits for
// them in bucket order.
//
// Releases take their buckets shared in bucket order too (migrations 005,
// 012), but a transaction that releases lanes in two statements (a delete,
// then a completion) can still hold a higher bucket while asking for a
// lower one, and so close a cycle with a waiting batch. The wait is
// therefore bounded by laneLockWait, well under PostgreSQL's
// deadlock_timeout: on timeout the batch gives back the buckets it got (a
// savepoint), lets the release through and tries again, instead of waiting
// for the deadlock detector to abort one side a second later.
func lockLanes(ctx context.Context, tx pgx.Tx, pool string, lanes []string) error {
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
		if err := sp.QueryRow(ctx, sqlSetLockTimeout, fmt.Sprintf("%dms", laneLockWait.Milliseconds())).Scan(&prev, &set); err != nil {
			return fmt.Errorf("lock lanes: %w", err)
		}
		if _, err = sp.Exec(ctx, sqlLaneLock, pool, lanes); err == nil {
			if err := sp.QueryRow(ctx, sqlSetLockTimeout, prev).Scan(&prev, &set); err != nil {
				return fmt.Errorf("lock lanes: %w", err)
			}
			return sp.Commit(ctx)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.LockNotAvailable {
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

// laneLockWait bounds a batch's wait for one lane bucket; it must stay well
// below PostgreSQL's deadlock_timeout (1 s by default).
const laneLockWait = 100 * time.Millisecond

func (p *lockedPool) matches(e outbox.Event) bool {
	return bustype.FilterMatches(p.eventTypes, p.tags, e)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func scanEvent(row pgx.CollectableRow) (event, error) {
	var e event
	var data, metadata []byte
	var id uuid.UUID
	err := row.Scan(&e.GlobalSequence, &id, &e.Type, &e.Key, &e.Tags, &data, &metadata, &e.OccurredAt, &e.txid)
	e.EventID = id
	e.Data = json.RawMessage(data)
	e.Metadata = json.RawMessage(metadata)
	return e, err
}

// ReleaseStuckLanes makes available the next job of every ordered lane that
// has pending jobs and none in flight: the safety net behind the release
// trigger (for a job deleted while pending jobs of its lane were being
// inserted, say). It returns how many jobs it released. Run calls it every
// few seconds beside the passes.
func ReleaseStuckLanes(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, sqlReleaseStuckLanes).Scan(&n); err != nil {
		return 0, fmt.Errorf("release stuck lanes: %w", err)
	}
	return n, nil
}

// PromoteLaneRetries makes available the due retries of ordered pools' jobs,
// which River's scheduler would only pick up within 5 s, while each holds its
// key. It returns how many queues had retries promoted.
func PromoteLaneRetries(ctx context.Context, db database.DB) (int64, error) {
	var n, notified int64
	if err := db.QueryRow(ctx, sqlPromoteLaneRetries).Scan(&n, &notified); err != nil {
		return 0, fmt.Errorf("promote due retries of ordered pools: %w", err)
	}
	return n, nil
}
