package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// The demo: three pools, realistic traffic and workers, so River UI has
// something to show — completed jobs, retries and dead letters.

type billingArgs struct{ workers.Args }

func (billingArgs) Kind() string { return "billing" }

type notifyArgs struct{ workers.Args }

func (notifyArgs) Kind() string { return "notifications" }

type accountsArgs struct{ workers.Args }

func (accountsArgs) Kind() string { return "accounts" }

type auditArgs struct{ workers.Args }

func (auditArgs) Kind() string { return "audit" }

// demoPoisonEvery is how often (in demo transactions, about 20 a second)
// an invoice is poison: one every 20-odd seconds. A multiple of 3: every
// third transaction has an invoice.
const demoPoisonEvery = 450

var demoPools = []bustype.PoolParams{
	// billing's poison invoices: 5 attempts within about 5 s (billingWorker.
	// NextRetry, which wins over the pool's retry schedule), then a dead
	// letter, and the checkpoint moves on.
	{Name: "billing", EventTypes: []string{"invoice.created", "invoice.paid"}, MaxAttempts: 5},
	{Name: "notifications", MaxAttempts: 3},
	{Name: "audit", MaxAttempts: 10},
	{Name: "accounts", Ordering: bustype.OrderingKey, MaxAttempts: 10},
}

// accountsWorker keeps, per customer, the last sequence it applied, in
// the key-ordered pool "accounts": it fails loudly (and the job shows the
// error in River UI) if an event ever arrives out of order. It also fails
// now and then, to show that a retry holds the customer's later events.
type accountsWorker struct {
	river.WorkerDefaults[accountsArgs]
	db *pgxpool.Pool
}

func (w *accountsWorker) NextRetry(*river.Job[accountsArgs]) time.Time {
	return time.Now().Add(time.Second)
}

func (w *accountsWorker) Work(ctx context.Context, job *river.Job[accountsArgs]) error {
	if rand.IntN(20) == 0 {
		return errors.New("demo: the ledger service timed out (this worker fails one time in twenty)")
	}
	return workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		var last int64
		err := tx.QueryRow(ctx, `INSERT INTO riverbus_demo_accounts (key, last_sequence, events) VALUES ($1, $2, 1)
			ON CONFLICT (key) DO UPDATE SET last_sequence = EXCLUDED.last_sequence, events = riverbus_demo_accounts.events + 1
			RETURNING coalesce((SELECT last_sequence FROM riverbus_demo_accounts WHERE key = $1), 0)`,
			job.Args.Key, job.Args.GlobalSequence).Scan(&last) // the subquery sees the row as it was before
		if err != nil {
			return err
		}
		if last > job.Args.GlobalSequence {
			return fmt.Errorf("demo: %s's event %d arrived after %d: out of order", job.Args.Key, job.Args.GlobalSequence, last)
		}
		return nil
	})
}

type billingWorker struct {
	river.WorkerDefaults[billingArgs]
}

// NextRetry retries a failed invoice after 0.5 s, 1 s, 1.5 s, 2 s: a poison
// invoice is a dead letter within seconds, so billing's checkpoint, which
// a retrying job holds, moves on quickly. A worker's own NextRetry wins over
// its pool's retry schedule (River asks the client's policy only when the
// worker returns zero); `pool update billing --retry-base 500ms` would do
// much the same without code.
func (w *billingWorker) NextRetry(job *river.Job[billingArgs]) time.Time {
	return time.Now().Add(time.Duration(job.Attempt) * 500 * time.Millisecond)
}

type invoice struct {
	Invoice string `json:"invoice"`
	Cents   int64  `json:"cents"`
}

func (w *billingWorker) Work(ctx context.Context, job *river.Job[billingArgs]) error {
	inv, err := workers.Decode[invoice](job.Args.Event)
	if err != nil {
		return err // a poison event: retried, then a dead letter
	}
	_ = inv
	time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
	return nil
}

// notifyWorker fails now and then, so retries and dead letters show.
type notifyWorker struct {
	river.WorkerDefaults[notifyArgs]
}

func (w *notifyWorker) NextRetry(*river.Job[notifyArgs]) time.Time {
	return time.Now().Add(2 * time.Second)
}

func (w *notifyWorker) Work(ctx context.Context, job *river.Job[notifyArgs]) error {
	if rand.IntN(5) == 0 {
		return errors.New("demo: the mail provider answered 503 (this worker fails one time in five)")
	}
	return nil
}

// auditWorker keeps a projection, exactly once per event: the count of
// events per key, in the same transaction that completes the job.
type auditWorker struct {
	river.WorkerDefaults[auditArgs]
	db *pgxpool.Pool
}

func (w *auditWorker) Work(ctx context.Context, job *river.Job[auditArgs]) error {
	return workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO riverbus_demo_audit (key, events) VALUES ($1, 1)
			ON CONFLICT (key) DO UPDATE SET events = riverbus_demo_audit.events + 1`, job.Args.Key)
		return err
	})
}

// setUpDemo creates the demo pools and projection tables and returns the
// demo handlers, each bound to its pool.
func setUpDemo(ctx context.Context, db *pgxpool.Pool) (*workers.Registry, error) {
	client, err := riverbus.NewClient(db, &riverbus.Config{FanoutDisabled: true})
	if err != nil {
		return nil, err
	}
	for _, p := range demoPools {
		if _, _, err := client.PoolCreate(ctx, p); err != nil {
			return nil, err
		}
	}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS riverbus_demo_audit (key text PRIMARY KEY, events bigint NOT NULL);
		CREATE TABLE IF NOT EXISTS riverbus_demo_accounts (key text PRIMARY KEY, last_sequence bigint NOT NULL, events bigint NOT NULL)`); err != nil {
		return nil, fmt.Errorf("create demo projection: %w", err)
	}
	ws := workers.NewRegistry()
	opts := &workers.AddOpts{MaxWorkers: 20}
	workers.Add(ws, &billingWorker{}, opts)
	workers.Add(ws, &notifyWorker{}, opts)
	workers.Add(ws, &auditWorker{db: db}, opts)
	workers.Add(ws, &accountsWorker{db: db}, opts)
	return ws, nil
}

// demoTraffic appends small transactions at about rate events per second
// until ctx ends. Now and then an invoice carries data the billing worker
// cannot decode: a poison event that ends as a dead letter.
// With tp, each append runs in a span of its own (demo.place_order), as a
// traced application's would, so its events' traces reach the handlers.
func demoTraffic(ctx context.Context, db *pgxpool.Pool, rate int, logger *slog.Logger, tp trace.TracerProvider) error {
	if rate <= 0 {
		return nil
	}
	interval := time.Second / time.Duration(rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	n := 0
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		n++
		customer := fmt.Sprintf("customer-%d", rand.IntN(50))
		region := []string{"region=eu", "region=us"}[rand.IntN(2)]
		inv := fmt.Sprintf("INV-%06d", n)
		cents := 100 + rand.IntN(100_000)
		events := []outbox.Event{{Type: "order.placed", Key: customer, Tags: []string{region},
			Data: mustJSON(map[string]any{"order": fmt.Sprintf("ORD-%06d", n), "cents": cents})}}
		if n%3 == 0 {
			data := mustJSON(invoice{Invoice: inv, Cents: int64(cents)})
			if n%demoPoisonEvery == 0 {
				data = json.RawMessage(`{"invoice": 42}`) // poison: invoice must be a string
			}
			events = append(events, outbox.Event{Type: "invoice.created", Key: customer, Tags: []string{region}, Data: data})
		}
		if n%7 == 0 {
			events = append(events, outbox.Event{Type: "invoice.paid", Key: customer, Tags: []string{region},
				Data: mustJSON(invoice{Invoice: inv, Cents: int64(cents)})})
		}
		actx, span := ctx, trace.Span(nil)
		if tp != nil {
			actx, span = tp.Tracer("github.com/riverbus/riverbus/demo").Start(ctx, "demo.place_order")
		}
		_, err := outbox.Append(actx, db, events...)
		if span != nil {
			span.End()
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			logger.Warn("demo traffic: append failed; will keep trying", "error", err)
			failing = true
		case err == nil && failing:
			logger.Info("demo traffic: appending again")
			failing = false
		}
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
