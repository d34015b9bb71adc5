package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/tracing"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
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

// event is an event as the general path reads it: all but its payload
// (Data and Metadata are nil; the insert builds the job's args from the
// event's row, sqlInsertJobs), its writer's transaction id, the trace
// context of its metadata, and its size: as stored on the batch's read, as
// jsonb once a group's probe measured it (probeEvents).
type event struct {
	outbox.Event
	txid  string
	trace tracing.Context
	size  int64
}

// unit is one job to insert: one event, or one part of a transaction's
// group. It names its events; their payload stays in the database.
type unit struct {
	first int64   // global sequence of its (first) event
	seqs  []int64 // its events, in order
	// event is an event job's event, without payload; nil for a group's.
	event *outbox.Event
	// group is a group part's args but the events (Events nil); nil for an
	// event's job.
	group *workers.GroupArgs
	lane  string
	late  bool
	// trace is the trace context of its (first traced) event, copied into
	// the job's metadata (tracing.JobMetadata).
	trace tracing.Context
	// undeliverable is why the unit can never become a job (found before
	// the insert: an event too deep for a handler's decoder); "" if none.
	undeliverable string
}

// stub returns the args of the unit's dead letter: its envelope without
// the payload, and reason.
func (u *unit) stub(reason string) any {
	if g := u.group; g != nil {
		return bustype.GroupJobStub{GlobalSequence: g.GlobalSequence, TransactionID: g.TransactionID, Key: g.Key,
			Late: g.Late, Part: g.Part, Parts: g.Parts, Sequences: u.seqs, Undeliverable: reason}
	}
	e := u.event
	return bustype.EventJobStub{EventHead: bustype.EventHead{GlobalSequence: e.GlobalSequence, EventID: e.EventID, Type: e.Type, Key: e.Key,
		Tags: e.Tags, OccurredAt: e.OccurredAt, Version: e.Version}, Late: u.late, Undeliverable: reason}
}

// fanOutPool runs one batch for pool name in one transaction: lock the pool
// row (skipping it when another instance has it), turn the events in
// (cursor, horizon] into jobs, deliver late events, move the cursor, commit.
// full reports that the batch was full, so more may be waiting.
func (f *Fanout) fanOutPool(ctx context.Context, name string) (BatchResult, bool, error) {
	start := time.Now()
	if res, full, handled, traceparents, err := f.fanOutPlain(ctx, name); err != nil {
		return BatchResult{}, false, err
	} else if handled {
		f.batchDone(res)
		f.batchTelemetry(res, start, "plain", traceparents)
		return res, full, nil
	}
	start = time.Now()
	res := BatchResult{Pool: name}
	full := false
	var undeliverable []*job
	var inserted []unit
	err := pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		inserted = nil
		// One round trip: the schema check (first: it refuses when the
		// schema needs newer code), settings, the pool row, the horizon
		// (read after the lock, so no older than the pool's cursor).
		p := lockedPool{name: name}
		var horizon int64
		var anySkipped bool
		b := &pgx.Batch{}
		b.Queue(migrations.SQLSchemaCheck, f.gate.Code())
		b.Queue(database.TxSettingsSQL)
		b.Queue(sqlPoolLock, name)
		b.Queue(sqlHorizonAndSkipped)
		br := tx.SendBatch(ctx, b)
		_, err := br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
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
		// The batch's budget, which late events spend first.
		maxEvents, maxBytes := f.cfg.BatchSize, int64(f.cfg.BatchBytes)
		if anySkipped && p.cursor > p.startAfter {
			late, took, err := readEvents(tx.Query(ctx, sqlLateEvents, name, p.cursor, p.startAfter, maxEvents, maxBytes))
			if err != nil {
				return fmt.Errorf("read late events: %w", err)
			}
			lateFull := took == maxEvents || took > len(late)
			maxEvents -= len(late)
			for _, e := range late {
				maxBytes -= e.size
			}
			if lateFull {
				// The rest waits for the next batch, which runs at once.
				maxEvents, full = 0, true
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
		if horizon > p.cursor && (maxEvents <= 0 || maxBytes <= 0) {
			full = true // the late events spent the budget
		} else if horizon > p.cursor {
			var read []event
			var took int
			var err error
			if len(p.eventTypes) > 0 {
				read, took, err = readEvents(tx.Query(ctx, sqlEventsOfTypes, p.cursor, horizon, p.tags, maxEvents, maxBytes, p.eventTypes))
			} else {
				read, took, err = readEvents(tx.Query(ctx, sqlEventsAll, p.cursor, horizon, p.tags, maxEvents, maxBytes))
			}
			if err != nil {
				return fmt.Errorf("read events: %w", err)
			}
			full = took == maxEvents || took > len(read)
			events := read
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
		return BatchResult{}, false, fmt.Errorf("fan out pool %q: %w", name, err)
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
func (f *Fanout) batchDone(res BatchResult) {
	if res.Jobs > 0 || res.Late > 0 {
		f.mu.Lock()
		f.stats.EventsFannedOut[res.Pool] += int64(res.Jobs)
		if res.Jobs > 0 {
			f.jobsAt[res.Pool] = time.Now()
		}
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
	seqs := make([]int64, len(events))
	for i, e := range events {
		seqs[i] = e.GlobalSequence
	}
	deep, _, err := probeEvents(ctx, tx, seqs, jsonDepthEvent, false)
	if err != nil {
		return nil, err
	}
	out := make([]unit, len(events))
	for i := range events {
		e := &events[i]
		out[i] = unit{first: e.GlobalSequence, seqs: seqs[i : i+1], event: &e.Event, lane: p.lane(e.Key), late: late,
			trace: e.trace, undeliverable: deep[e.GlobalSequence]}
	}
	return out, nil
}

// lane is the ordering lane of an event key in the pool (lanes.Of).
func (p *lockedPool) lane(key string) string { return lanes.Of(p.ordering, key) }

func (p *lockedPool) matches(e outbox.Event) bool {
	return bustype.FilterMatches(p.eventTypes, p.tags, e.Type, e.Tags)
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

// readEvents reads a budgeted read's events (budgetedRead) and how many
// it took before the byte budget cut it: when it took its limit, or more
// than it returns, the read was full and more may be waiting.
func readEvents(rows pgx.Rows, err error) (events []event, took int, _ error) {
	if err != nil {
		return nil, 0, err
	}
	var n int64
	events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (event, error) {
		var e event
		err := row.Scan(append(e.dest(), &n)...)
		return e, err
	})
	return events, int(n), err
}

// dest is where a row of eventHeadColumns and a size goes.
func (e *event) dest() []any {
	return []any{&e.GlobalSequence, &e.EventID, &e.Type, &e.Key, &e.Tags, &e.OccurredAt, &e.Version, &e.txid,
		&e.trace.TraceParent, &e.trace.TraceState, &e.size}
}
