package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/tracing"
	"github.com/riverbus/riverbus/outbox"
)

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
	args  envelope
	first int64 // global sequence of its (first) event
	lane  string
	late  bool
	// trace is the trace context of its (first traced) event, copied into
	// the job's metadata (tracing.JobMetadata).
	trace tracing.Context
}

// FanOutPool runs one batch for pool name in one transaction: lock the pool
// row (skipping it when another instance has it), turn the events in
// (cursor, horizon] into jobs, deliver late events, move the cursor, commit.
// full reports that the batch was full, so more may be waiting.
func (f *Fanout) FanOutPool(ctx context.Context, name string) (fanout.BatchResult, bool, error) {
	start := time.Now()
	if res, full, handled, traceparents, err := f.fanOutPlain(ctx, name); err != nil {
		return fanout.BatchResult{}, false, err
	} else if handled {
		f.batchDone(res)
		f.batchTelemetry(res, start, "plain", traceparents)
		return res, full, nil
	}
	start = time.Now()
	res := fanout.BatchResult{Pool: name}
	full := false
	var undeliverable []*job
	var inserted []unit
	err := pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		inserted = nil
		// One round trip: settings, the pool row, the horizon (read after
		// the lock, so no older than the pool's cursor).
		p := lockedPool{name: name}
		var horizon int64
		var anySkipped bool
		b := &pgx.Batch{}
		b.Queue(database.TxSettingsSQL)
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
		undeliverable, inserted = dead, units
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
	f.batchTelemetry(res, start, "general", f.unitTraceParents(inserted))
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
		out[i] = unit{args: eventJob{Event: e.Event, Late: late}, first: e.GlobalSequence, lane: p.lane(e.Key), late: late,
			trace: tracing.FromMetadata(e.Metadata)}
	}
	return out, nil
}

// lane is the ordering lane of an event key in the pool (lanes.Of).
func (p *lockedPool) lane(key string) string { return lanes.Of(p.ordering, key) }

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
