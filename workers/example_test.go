package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// BillingArgs are the args of the jobs of pool "billing": the event
// envelope, and the pool's name as the River job kind.
type BillingArgs struct{ workers.Args }

func (BillingArgs) Kind() string { return "billing" }

// InvoicePaid is the data of "invoice.paid" events.
type InvoicePaid struct {
	Invoice string `json:"invoice"`
	Cents   int64  `json:"cents"`
}

// BillingWorker books paid invoices into a projection in the same database,
// exactly once per event.
type BillingWorker struct {
	river.WorkerDefaults[BillingArgs]
	db     *pgxpool.Pool
	booked chan<- string
}

func (w *BillingWorker) Work(ctx context.Context, job *river.Job[BillingArgs]) error {
	paid, err := workers.Decode[InvoicePaid](job.Args.Event)
	if err != nil {
		return err // retried, then a dead letter: never skipped
	}
	err = workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO revenue (invoice, cents) VALUES ($1, $2)`, paid.Invoice, paid.Cents)
		return err
	})
	if err == nil {
		w.booked <- fmt.Sprintf("event %d %s: booked %s, %d cents", job.Args.GlobalSequence, job.Args.Type, paid.Invoice, paid.Cents)
	}
	return err
}

func Example() {
	ctx := context.Background()
	db, drop := exampleDB() // a fresh, migrated test database
	defer drop()

	booked := make(chan string, 1)
	ws := workers.NewRegistry()
	workers.Add(ws, &BillingWorker{db: db, booked: booked}, nil)
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	// The pool (once, at deploy time) and the projection the worker writes.
	if _, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "billing", EventTypes: []string{"invoice.paid"}}); err != nil {
		panic(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE revenue (invoice text PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	// The fan-out turns the event into one job of the pool.
	_, err = outbox.Append(ctx, db, outbox.Event{
		Type: "invoice.paid",
		Key:  "inv-1",
		Data: json.RawMessage(`{"invoice": "inv-1", "cents": 1250}`),
	})
	if err != nil {
		panic(err)
	}

	select {
	case msg := <-booked:
		fmt.Println(msg)
	case <-time.After(20 * time.Second):
		fmt.Println("timed out")
	}
	var cents int64
	if err := db.QueryRow(ctx, `SELECT cents FROM revenue WHERE invoice = 'inv-1'`).Scan(&cents); err != nil {
		panic(err)
	}
	fmt.Println("revenue:", cents)

	// Output:
	// event 1 invoice.paid: booked inv-1, 1250 cents
	// revenue: 1250
}
