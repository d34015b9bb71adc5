package riverbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// InvoiceArgs are the jobs of pool "invoicing": the event envelope
// (workers.Args), and a Kind that names the pool.
type InvoiceArgs struct{ workers.Args }

func (InvoiceArgs) Kind() string { return "invoicing" }

// InvoiceWorker is a plain River worker: riverbus runs it once per event of
// its pool, retrying it when it fails.
type InvoiceWorker struct {
	river.WorkerDefaults[InvoiceArgs]
	mu      sync.Mutex
	handled []string
}

func (w *InvoiceWorker) Work(ctx context.Context, job *river.Job[InvoiceArgs]) error {
	var invoice struct {
		Total int `json:"total"`
	}
	if err := json.Unmarshal(job.Args.Data, &invoice); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handled = append(w.handled, fmt.Sprintf("event %d: %s %s, total %d",
		job.Args.GlobalSequence, job.Args.Type, job.Args.Key, invoice.Total))
	return nil
}

// An application appends events in its own transactions; a riverbus Client
// turns each into a job of every pool it matches and works the jobs with
// River workers bound to their pools.
func Example() {
	ctx := context.Background()
	t := &exampleT{}
	defer t.done()
	// A fresh test database. An application connects with pgxpool.New and
	// runs migrations.Up(ctx, db) once at deploy time.
	db := riverbustest.NewDatabase(t)

	worker := &InvoiceWorker{}
	ws := workers.NewRegistry()
	workers.Add(ws, worker, nil) // works pool "invoicing" (InvoiceArgs.Kind)

	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	if err != nil {
		log.Fatal(err)
	}
	// Pools are created once (here, or `riverbus pool create invoicing`).
	if _, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "invoicing"}); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	appended, err := outbox.Append(ctx, db,
		outbox.Event{Type: "InvoiceIssued", Key: "inv-1", Data: json.RawMessage(`{"total": 42}`)},
		outbox.Event{Type: "InvoiceIssued", Key: "inv-2", Data: json.RawMessage(`{"total": 7}`)},
	)
	if err != nil {
		log.Fatal(err)
	}

	// Read your writes: wait until the pool has handled the last event.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.CheckpointWait(waitCtx, "invoicing", appended[1].GlobalSequence, nil); err != nil {
		log.Fatal(err)
	}
	worker.mu.Lock()
	defer worker.mu.Unlock()
	slices.Sort(worker.handled) // an unordered pool may run them in any order
	for _, h := range worker.handled {
		fmt.Println(h)
	}

	// Output:
	// event 1: InvoiceIssued inv-1, total 42
	// event 2: InvoiceIssued inv-2, total 7
}
