package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/riversql"
	"github.com/riverbus/riverbus/internal/tracing"
)

// The general path's insert. Each unit's envelope is encoded here, one by
// one, so that a unit that can never become a job (JSON nested deeper than
// encoding/json accepts, an envelope too big for jsonb) is found without
// losing the rest of the batch: it becomes a dead letter of the pool (a
// River job inserted as `discarded`, which the dead-letter trigger keeps)
// whose args are a small stub naming the event and the reason
// (bustype.EventJobStub, bustype.GroupJobStub). `dlq retry` rebuilds the
// real envelope from riverbus_event (package workers).
//
// The jobs are inserted with COPY, like River's InsertManyFastTx, but
// created_at and scheduled_at are left to the columns' default, now(): the
// database's clock, by which workers fetch, and not this host's, which River
// would use (package riversql).

// envelopeMaxBytes is the largest encoded envelope the general path inserts.
// Bigger ones become dead letters without a try. It is PostgreSQL's limit
// for one value (1 GB); jsonb refuses smaller ones (256 MB of content),
// which the insert finds out. A variable so tests can lower it.
var envelopeMaxBytes = 1<<30 - 1

// job is a unit on its way into river_job.
type job struct {
	u       unit
	args    []byte // the encoded envelope; nil when undeliverable
	reason  string // why the unit cannot become a job; "" when it can
	pending bool
	// meta is the job's metadata: an ordered pool's lane, the event's
	// trace context; nil for none.
	meta []byte
}

// insertJobs encodes and inserts the batch's units, in sequence order for
// an ordered pool, and returns the ones that became dead letters.
func (f *Fanout) insertJobs(ctx context.Context, tx pgx.Tx, p *lockedPool, units []unit) ([]*job, error) {
	ordered := p.ordering == bustype.OrderingKey || p.ordering == bustype.OrderingGlobal
	if ordered {
		slices.SortStableFunc(units, func(a, b unit) int { return cmpInt64(a.first, b.first) })
	}
	jobs := make([]*job, len(units))
	for i, u := range units {
		j := &job{u: u}
		args, err := u.args.encode()
		switch {
		case err != nil:
			j.reason = encodeFailure(err)
		case len(args) > envelopeMaxBytes:
			j.reason = fmt.Sprintf("too big: the envelope is %d bytes, over the limit of %d", len(args), envelopeMaxBytes)
		default:
			j.args = args
		}
		j.meta = jobMetadata(ordered, u)
		jobs[i] = j
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
		refused, err := copyJobs(ctx, sp, p, jobs)
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
		for _, j := range refused {
			j.args = nil
		}
	}
	var dead []*job
	for _, j := range jobs {
		if j.args == nil {
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
		if j.args == nil {
			d.DeadLetter(j.u.lane)
			continue
		}
		j.pending = d.Job(j.u.lane)
	}
}

// copyJobs inserts the jobs that have args, with COPY, and notifies River's
// producers of the pool's queue when one is available. When the database
// refuses a row's data (a jsonb limit), it finds the rows it refuses by
// halving the batch, each try in a savepoint, and returns them: the caller
// rolls tx back and inserts again without them.
func copyJobs(ctx context.Context, tx pgx.Tx, p *lockedPool, jobs []*job) ([]*job, error) {
	var todo []*job
	for _, j := range jobs {
		if j.args != nil {
			todo = append(todo, j)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	refused, err := copyFind(ctx, tx, p, todo)
	if err != nil || len(refused) > 0 {
		return refused, err
	}
	if slices.ContainsFunc(todo, func(j *job) bool { return !j.pending }) {
		if _, err := tx.Exec(ctx, riversql.NotifyInsertQueues, []string{p.queue}); err != nil {
			return nil, fmt.Errorf("notify River: %w", err)
		}
	}
	return nil, nil
}

func copyFind(ctx context.Context, tx pgx.Tx, p *lockedPool, jobs []*job) ([]*job, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	_, err = riversql.CopyJobs(ctx, sp, len(jobs), func(i int) riversql.JobRow {
		j := jobs[i]
		state := "available"
		if j.pending {
			state = "pending"
		}
		return riversql.JobRow{Args: j.args, Kind: p.name, MaxAttempts: p.maxAttempts, Metadata: j.meta,
			Priority: p.priority, Queue: p.queue, State: state}
	})
	if err == nil {
		return nil, sp.Commit(ctx)
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return nil, rerr
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !refusedData(pgErr) {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	if len(jobs) == 1 {
		jobs[0].reason = "refused by the database: " + pgErr.Message
		return jobs, nil
	}
	half := len(jobs) / 2
	a, err := copyFind(ctx, tx, p, jobs[:half])
	if err != nil {
		return nil, err
	}
	b, err := copyFind(ctx, tx, p, jobs[half:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// encodeFailure is the reason of a unit whose envelope encoding/json cannot
// encode: short, as `dlq list` shows the first 60 characters.
func encodeFailure(err error) string {
	if strings.Contains(err.Error(), "exceeded max depth") {
		return "too deep: JSON nested over the 10000 levels encoding/json accepts (" + err.Error() + ")"
	}
	return "cannot be encoded as JSON: " + err.Error()
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
		stub, err := json.Marshal(j.u.args.stub(j.reason))
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
