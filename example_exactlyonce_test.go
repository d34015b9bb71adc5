package riverbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// RevenueArgs are the jobs of pool "revenue".
type RevenueArgs struct{ workers.Args }

func (RevenueArgs) Kind() string { return "revenue" }

// InvoicePaid is the data of "InvoicePaid" events.
type InvoicePaid struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// RevenueProjection keeps revenue per customer in a table of the same
// database. workers.RunExactlyOnce commits its write and the job's
// completion in one transaction: a retry, a crash or a rescued job never
// books an event twice.
type RevenueProjection struct {
	river.WorkerDefaults[RevenueArgs]
	db *pgxpool.Pool
}

func (w *RevenueProjection) Work(ctx context.Context, job *river.Job[RevenueArgs]) error {
	paid, err := workers.Decode[InvoicePaid](job.Args.Event)
	if err != nil {
		return err // retried, then a dead letter: never skipped
	}
	return workers.RunExactlyOnce(ctx, w.db, job, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO revenue (customer, cents) VALUES ($1, $2)
			ON CONFLICT (customer) DO UPDATE SET cents = revenue.cents + excluded.cents`, paid.Customer, paid.Cents)
		return err
	})
}

// A projection updated exactly once per event, with workers.RunExactlyOnce.
func Example_exactlyOnceProjection() {
	ctx := context.Background()
	t := &exampleT{}
	defer t.done()
	db := riverbustest.NewDatabase(t)
	if _, err := db.Exec(ctx, `CREATE TABLE revenue (customer text PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	ws := workers.NewRegistry()
	workers.Add(ws, &RevenueProjection{db: db}, nil)
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	if err != nil {
		log.Fatal(err)
	}
	// The pool takes only the events its projection needs.
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "revenue", EventTypes: []string{"InvoicePaid"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	appended, err := outbox.Append(ctx, db,
		outbox.Event{Type: "InvoicePaid", Data: json.RawMessage(`{"customer": "acme", "cents": 1250}`)},
		outbox.Event{Type: "InvoiceVoided", Data: json.RawMessage(`{"customer": "acme"}`)},
		outbox.Event{Type: "InvoicePaid", Data: json.RawMessage(`{"customer": "acme", "cents": 750}`)},
		outbox.Event{Type: "InvoicePaid", Data: json.RawMessage(`{"customer": "globex", "cents": 300}`)},
	)
	if err != nil {
		log.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.CheckpointWait(waitCtx, "revenue", appended[len(appended)-1].GlobalSequence, nil); err != nil {
		log.Fatal(err)
	}

	rows, err := db.Query(ctx, `SELECT customer, cents FROM revenue ORDER BY customer`)
	if err != nil {
		log.Fatal(err)
	}
	var (
		customer string
		cents    int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&customer, &cents}, func() error {
		fmt.Printf("%s: %d cents\n", customer, cents)
		return nil
	}); err != nil {
		log.Fatal(err)
	}

	// Output:
	// acme: 2000 cents
	// globex: 300 cents
}
