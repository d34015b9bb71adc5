package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/riversql"
	"github.com/riverbus/riverbus/internal/tracing"
)

// The general path's insert. Each job's args are built by the database, in
// the insert statement (sqlInsertJobs), from the events' rows: an event's
// payload never travels to this process, however big an appender made it,
// so the fan-out's memory does not depend on it. A unit that can never
// become a job (JSON nested deeper than a handler's decoder accepts, found
// by tooDeep before the insert; an envelope the database refuses, too big
// for jsonb) becomes a dead letter of the pool without losing the rest of
// the batch: a River job inserted as `discarded`, which the dead-letter
// trigger keeps, whose args are a small stub naming the event and the
// reason (bustype.EventJobStub, bustype.GroupJobStub). `dlq retry`
// rebuilds the real envelope from riverbus_event (package deadletters).
//
// created_at and scheduled_at are left to the columns' default, now(): the
// database's clock, by which workers fetch, and not this host's, which
// River would use (package riversql).

// job is a unit on its way into river_job.
type job struct {
	u       unit
	reason  string // why the unit cannot become a job; "" when it can
	pending bool
	// meta is the job's metadata: an ordered pool's lane, the event's
	// trace context; nil for none.
	meta []byte
}

// insertJobs inserts the batch's units, in sequence order for an ordered
// pool, and returns the ones that became dead letters.
func (f *Fanout) insertJobs(ctx context.Context, tx pgx.Tx, p *lockedPool, units []unit) ([]*job, error) {
	ordered := p.ordering == bustype.OrderingKey || p.ordering == bustype.OrderingGlobal
	if ordered {
		slices.SortStableFunc(units, func(a, b unit) int { return cmpInt64(a.first, b.first) })
	}
	jobs := make([]*job, len(units))
	for i, u := range units {
		jobs[i] = &job{u: u, reason: u.undeliverable, meta: jobMetadata(ordered, u)}
	}
	var held map[string]bool
	if ordered {
		var err error
		if held, err = busyLanes(ctx, tx, p, units); err != nil {
			return nil, err
		}
	}
	for {
		if ordered {
			decidePending(p, jobs, held)
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		refused, err := writeJobs(ctx, sp, p, jobs)
		if err != nil {
			return nil, err
		}
		if len(refused) == 0 {
			if err := sp.Commit(ctx); err != nil {
				return nil, err
			}
			break
		}
		// The database refused some envelopes: they are dead letters, and
		// the lanes' decisions change (a blocking dead letter holds its
		// lane), so the batch is inserted again from the start.
		if err := sp.Rollback(ctx); err != nil {
			return nil, err
		}
	}
	var dead []*job
	for _, j := range jobs {
		if j.reason != "" {
			dead = append(dead, j)
		}
	}
	if len(dead) > 0 {
		if err := insertDeadLetters(ctx, tx, p, dead); err != nil {
			return nil, err
		}
	}
	return dead, nil
}

// jobMetadata is the metadata of u's job: its lane in an ordered pool
// (lanes.Metadata), and its event's trace context under the keys River's
// otelriver middleware reads (tracing.TraceParentKey). Nil when it has
// neither.
func jobMetadata(ordered bool, u unit) []byte {
	if u.trace.TraceParent == "" {
		if ordered {
			return lanes.Metadata(u.lane)
		}
		return nil
	}
	m := map[string]string{tracing.TraceParentKey: u.trace.TraceParent}
	if u.trace.TraceState != "" {
		m[tracing.TraceStateKey] = u.trace.TraceState
	}
	if ordered {
		m[lanes.MetadataKey] = u.lane
	}
	b, _ := json.Marshal(m)
	return b
}

// busyLanes takes the locks of the units' lanes and returns those that
// are busy (lanes.Busy).
func busyLanes(ctx context.Context, tx pgx.Tx, p *lockedPool, units []unit) (map[string]bool, error) {
	ls := make([]string, 0, len(units))
	for _, u := range units {
		ls = append(ls, u.lane)
	}
	return lanes.Busy(ctx, tx, p.name, ls, p.onDeadLetter == bustype.DeadLetterBlock)
}

// decidePending makes a job pending when its lane already has one in flight
// before it (lanes.Decider).
func decidePending(p *lockedPool, jobs []*job, held map[string]bool) {
	d := lanes.NewDecider(held, p.onDeadLetter == bustype.DeadLetterBlock)
	for _, j := range jobs {
		if j.reason != "" {
			d.DeadLetter(j.u.lane)
			continue
		}
		j.pending = d.Job(j.u.lane)
	}
}

// writeJobs inserts the jobs that can become jobs and notifies River's
// producers of the pool's queue when one is available. When the database
// refuses a job's args (a jsonb limit), it finds the jobs it refuses
// (isolate), gives them their reason and returns them: the caller rolls
// tx back and inserts again without them.
func writeJobs(ctx context.Context, tx pgx.Tx, p *lockedPool, jobs []*job) ([]*job, error) {
	var todo []*job
	for _, j := range jobs {
		if j.reason == "" {
			todo = append(todo, j)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	refused, err := isolate(ctx, tx, todo, func(tx pgx.Tx, jobs []*job) error { return insertSome(ctx, tx, p, jobs) })
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if len(refused) > 0 {
		var out []*job
		for _, r := range refused {
			r.item.reason = refusedReason(r.err)
			out = append(out, r.item)
		}
		return out, nil
	}
	if slices.ContainsFunc(todo, func(j *job) bool { return !j.pending }) {
		if _, err := tx.Exec(ctx, riversql.NotifyInsertQueues, []string{p.queue}); err != nil {
			return nil, fmt.Errorf("notify River: %w", err)
		}
	}
	return nil, nil
}

// insertSome inserts jobs with sqlInsertJobs.
func insertSome(ctx context.Context, tx pgx.Tx, p *lockedPool, jobs []*job) error {
	var (
		seqs                   []int64
		firsts                 = make([]int64, len(jobs))
		lo, hi, parts, ofParts = make([]int32, len(jobs)), make([]int32, len(jobs)), make([]int32, len(jobs)), make([]int32, len(jobs))
		txids                  = make([]*string, len(jobs))
		keys                   = make([]string, len(jobs))
		late                   = make([]bool, len(jobs))
		states                 = make([]string, len(jobs))
		metas                  = make([][]byte, len(jobs))
	)
	for i, j := range jobs {
		u := &j.u
		firsts[i], late[i] = u.first, u.late
		lo[i] = int32(len(seqs) + 1) // PostgreSQL arrays count from 1
		seqs = append(seqs, u.seqs...)
		hi[i] = int32(len(seqs))
		if g := u.group; g != nil {
			txids[i], keys[i], parts[i], ofParts[i] = &g.TransactionID, g.Key, int32(g.Part), int32(g.Parts)
		}
		states[i] = "available"
		if j.pending {
			states[i] = "pending"
		}
		metas[i] = j.meta
		if metas[i] == nil {
			metas[i] = []byte("{}")
		}
	}
	tag, err := tx.Exec(ctx, sqlInsertJobs, p.name, p.maxAttempts, p.priority, p.queue, seqs,
		firsts, lo, hi, txids, keys, late, parts, ofParts, states, metas)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(jobs)) {
		return fmt.Errorf("inserted %d jobs of %d", tag.RowsAffected(), len(jobs))
	}
	return nil
}

// refusal is an item the database refused alone (isolate), and its error.
type refusal[T any] struct {
	item T
	err  *pgconn.PgError
}

// isolate runs try on items in a savepoint of tx. When the database
// refuses the data (refusedData), it halves items and tries each half, each
// in a savepoint of its own, down to single items, and returns those it
// refuses alone, with the database's error: the rest succeeded. Any other
// error ends it.
func isolate[T any](ctx context.Context, tx pgx.Tx, items []T, try func(pgx.Tx, []T) error) ([]refusal[T], error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	err = try(sp, items)
	if err == nil {
		return nil, sp.Commit(ctx)
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return nil, rerr
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !refusedData(pgErr) {
		return nil, err
	}
	if len(items) == 1 {
		return []refusal[T]{{items[0], pgErr}}, nil
	}
	half := len(items) / 2
	a, err := isolate(ctx, tx, items[:half], try)
	if err != nil {
		return nil, err
	}
	b, err := isolate(ctx, tx, items[half:], try)
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// JSON depth. A handler decodes its job's args with encoding/json, which
// refuses JSON nested deeper than 10,000 levels: an event whose data or
// metadata, inside its envelope, would be that deep can never become a
// job. The probe asks for an item at or below level 9,999 of the envelope,
// as migration 007's trigger does for a retry (a level of margin), so
// in an event's data or metadata, below the levels the envelope adds: one
// for an event's job ({"data": …}), three for a group's ({"events":
// [{"data": …}]}).
const (
	jsonDepthEvent = `lax $.**{9998 to last}`
	jsonDepthGroup = `lax $.**{9996 to last}`
)

// tooDeepReason is the reason of an event too deep for a handler; it ends
// as encoding/json's own error does.
const tooDeepReason = "too deep: JSON nested over the 10000 levels encoding/json accepts (exceeded max depth)"

// probeEvents returns, of the events seqs, those nested too deep for their
// job (path, jsonDepthEvent or jsonDepthGroup), with the reason, and, when
// measure, the others' sizes as jsonb. The database
// walks the events; one too deep for its own stack to walk is found by
// isolate, and too deep all the same.
func probeEvents(ctx context.Context, tx pgx.Tx, seqs []int64, path string, measure bool) (deep map[int64]string, sizes map[int64]int64, _ error) {
	deep, sizes = map[int64]string{}, map[int64]int64{}
	if len(seqs) == 0 {
		return deep, sizes, nil
	}
	refused, err := isolate(ctx, tx, seqs, func(tx pgx.Tx, seqs []int64) error {
		rows, err := tx.Query(ctx, sqlProbeEvents, seqs, path, measure, groupPartMaxBytes)
		if err != nil {
			return err
		}
		var seq, size int64
		var tooDeep bool
		_, err = pgx.ForEachRow(rows, []any{&seq, &tooDeep, &size}, func() error {
			if tooDeep {
				deep[seq] = tooDeepReason
			}
			sizes[seq] = size
			return nil
		})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("probe events: %w", err)
	}
	for _, r := range refused {
		deep[r.item] = refusedReason(r.err)
	}
	return deep, sizes, nil
}

// refusedReason is the reason of a unit the database refused alone: too
// deep when its stack could not walk it, else its message.
func refusedReason(err *pgconn.PgError) string {
	if err.Code == pgerrcode.StatementTooComplex {
		return tooDeepReason + " (" + err.Message + ")"
	}
	return "refused by the database: " + err.Message
}

// refusedData reports whether err is the database refusing a value (a data
// exception, or a limit such as jsonb's size or the stack depth of its
// parser), rather than a failure of the connection or the transaction.
func refusedData(err *pgconn.PgError) bool {
	return pgerrcode.IsDataException(err.Code) || pgerrcode.IsProgramLimitExceeded(err.Code)
}

// insertDeadLetters inserts a discarded job for each undeliverable unit, so
// that the dead-letter trigger keeps it in riverbus_dead_letter. Its args are
// a stub: the envelope without the payload (every event's data and
// metadata; a group's events are named by their sequences), and the
// reason. It keeps whatever else the envelope says (late, a group's part),
// which the retry's rebuild copies back.
func insertDeadLetters(ctx context.Context, tx pgx.Tx, p *lockedPool, dead []*job) error {
	args := make([][]byte, len(dead))
	metas := make([][]byte, len(dead))
	reasons := make([]string, len(dead))
	for i, j := range dead {
		stub, err := json.Marshal(j.u.stub(j.reason))
		if err != nil {
			return fmt.Errorf("encode dead-letter stub: %w", err)
		}
		args[i], reasons[i] = stub, j.reason
		metas[i] = j.meta
		if metas[i] == nil {
			metas[i] = []byte("{}")
		}
	}
	if _, err := tx.Exec(ctx, sqlInsertUndeliverable, p.name, p.maxAttempts, p.priority, p.queue, args, metas, reasons); err != nil {
		return fmt.Errorf("insert dead letters: %w", err)
	}
	return nil
}
