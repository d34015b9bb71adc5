package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

const (
	// benchKind is the pool name, job kind and queue of single-pool
	// scenarios, on both sides.
	benchKind = "bench"
	// copyChunk is how many events one COPY appends.
	copyChunk = 10_000
	// insertBatch is the raw River insert batch, the fan-out's BatchSize.
	insertBatch = 1000
)

// Every event looks like this: with the envelope around it, a job's args
// come to about 290 bytes, a typical event's size.
const (
	eventType = "order.placed"
	eventTag  = "tenant=acme"
)

func eventKey(i int) string { return fmt.Sprintf("order-%08d", i) }

// eventKeyOf is event i's key when keys distinct keys take turns; keys 0:
// every event has a key of its own.
func eventKeyOf(i, keys int) string {
	if keys > 0 {
		return eventKey(i % keys)
	}
	return eventKey(i)
}

func eventData(i int) string {
	return fmt.Sprintf(`{"order_id":"order-%08d","amount_cents":%d,"currency":"EUR","customer":"cust-%05d"}`,
		i, 1000+i%90_000, i%100_000)
}

// newEvent is event i as the application would append it.
func newEvent(i int) outbox.Event {
	return outbox.Event{Type: eventType, Key: eventKey(i), Tags: []string{eventTag}, Data: json.RawMessage(eventData(i))}
}

// copyEvents appends n events with COPY, copyChunk rows per statement, and
// returns the last global sequence. Every row goes through riverbus's
// triggers as an application's would. keys is as for eventKeyOf.
func copyEvents(ctx context.Context, db *pgxpool.Pool, n, keys int) (int64, error) {
	cols := []string{"type", "key", "tags", "data", "metadata"}
	tags := []string{eventTag}
	for done := 0; done < n; {
		k := min(copyChunk, n-done)
		i := 0
		_, err := db.CopyFrom(ctx, pgx.Identifier{"riverbus_event"}, cols, pgx.CopyFromFunc(func() ([]any, error) {
			if i == k {
				return nil, nil
			}
			row := []any{eventType, eventKeyOf(done+i, keys), tags, eventData(done + i), "{}"}
			i++
			return row, nil
		}))
		if err != nil {
			return 0, fmt.Errorf("copy events: %w", err)
		}
		done += k
	}
	var last int64
	if err := db.QueryRow(ctx, "SELECT coalesce(max(global_sequence), 0) FROM riverbus_event").Scan(&last); err != nil {
		return 0, err
	}
	return last, nil
}

// createPools creates pools named benchKind (n == 1) or benchKind_1 …
// benchKind_n, from the beginning of the log, and returns their names.
// Each option changes the pools' params.
func createPools(ctx context.Context, db *pgxpool.Pool, n int, opts ...func(*bustype.PoolParams)) ([]string, error) {
	names := poolNames(n)
	for _, name := range names {
		params := bustype.PoolParams{Name: name, From: bustype.FromBeginning}
		for _, o := range opts {
			o(&params)
		}
		if _, _, err := pools.Create(ctx, db, params); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func poolNames(n int) []string {
	if n == 1 {
		return []string{benchKind}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s_%d", benchKind, i+1)
	}
	return names
}

// catchUp calls f.Pass until every pool's cursor reaches last.
func catchUp(ctx context.Context, f *fanout.Fanout, db *pgxpool.Pool, last int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := f.Pass(ctx)
		if err != nil {
			return err
		}
		if res.More {
			continue
		}
		pools, err := pools.List(ctx, db)
		if err != nil {
			return err
		}
		done := true
		for _, p := range pools {
			done = done && p.Cursor >= last
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fan-out did not catch up with sequence %d within %s", last, timeout)
		}
		time.Sleep(time.Millisecond) // the horizon waits at a gap: do not spin
	}
}

// envelopeArgs are raw River job args with exactly the JSON of a pool job's
// args: the event envelope (and "late" when set).
type envelopeArgs struct {
	kind string
	workers.Args
}

func (a envelopeArgs) Kind() string { return a.kind }

// benchArgs are what the workers of both sides decode.
type benchArgs struct{ workers.Args }

func (benchArgs) Kind() string { return benchKind }

// rawEvents returns n events as the fan-out would have read them: sequence,
// id and occurred_at filled in.
func rawEvents(n int) []outbox.Event {
	now := time.Now().Truncate(time.Microsecond)
	events := make([]outbox.Event, n)
	for i := range events {
		e := newEvent(i)
		e.GlobalSequence = int64(i + 1)
		e.EventID = uuid.Must(uuid.NewV7())
		e.Metadata = json.RawMessage(`{}`)
		e.OccurredAt = now
		events[i] = e
	}
	return events
}

// rawBatches turns events into raw River insert batches of insertBatch jobs
// for each of the pools, with the insert options the fan-out uses.
func rawBatches(events []outbox.Event, pools []string) [][]river.InsertManyParams {
	var batches [][]river.InsertManyParams
	for _, pool := range pools {
		opts := &river.InsertOpts{Queue: bustype.DefaultQueue(pool), MaxAttempts: bustype.MaxAttemptsDefault, Priority: bustype.PriorityDefault}
		for lo := 0; lo < len(events); lo += insertBatch {
			hi := min(lo+insertBatch, len(events))
			batch := make([]river.InsertManyParams, 0, hi-lo)
			for _, e := range events[lo:hi] {
				batch = append(batch, river.InsertManyParams{Args: envelopeArgs{kind: pool, Args: workers.Args{Event: e}}, InsertOpts: opts})
			}
			batches = append(batches, batch)
		}
	}
	return batches
}

// insertRaw inserts batches with InsertManyFastTx, one transaction per
// batch, from conc goroutines.
func insertRaw(ctx context.Context, client *river.Client[pgx.Tx], db *pgxpool.Pool, batches [][]river.InsertManyParams, conc int) error {
	work := make(chan []river.InsertManyParams)
	wait := benchkit.Work(conc, work, func(batch []river.InsertManyParams) error {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			_, err := client.InsertManyFastTx(ctx, tx, batch)
			return err
		})
		if err != nil {
			return fmt.Errorf("raw insert: %w", err)
		}
		return nil
	})
	for _, b := range batches {
		select {
		case work <- b:
		case <-ctx.Done():
		}
	}
	close(work)
	if err := wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// serveFanout runs f's services until the returned stop is called, which
// waits for them to end.
func serveFanout(ctx context.Context, f *fanout.Fanout) (stop func()) {
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = f.Run(runCtx)
	}()
	return func() {
		cancel()
		<-stopped
	}
}

// argsSize returns the mean size in bytes of the jobs' args as compact JSON
// (as River encodes them), over a sample of jobs.
func argsSize(ctx context.Context, db *pgxpool.Pool) (float64, error) {
	rows, err := db.Query(ctx, "SELECT args::text FROM river_job ORDER BY id LIMIT 1000")
	if err != nil {
		return 0, err
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(texts) == 0 {
		return 0, err
	}
	total := 0
	for _, t := range texts {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(t)); err != nil {
			return 0, err
		}
		total += b.Len()
	}
	return float64(total) / float64(len(texts)), nil
}
