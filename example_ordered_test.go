package riverbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// LedgerArgs are the jobs of pool "ledger".
type LedgerArgs struct{ workers.Args }

func (LedgerArgs) Kind() string { return "ledger" }

// LedgerWorker records, per account (the event key), the events in the
// order it handled them.
type LedgerWorker struct {
	river.WorkerDefaults[LedgerArgs]
	mu      sync.Mutex
	history map[string][]string
}

func (w *LedgerWorker) Work(ctx context.Context, job *river.Job[LedgerArgs]) error {
	if job.Args.Type == "AccountOpened" {
		time.Sleep(50 * time.Millisecond) // slow work: in an unordered pool the account's next events would overtake it
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.history[job.Args.Key] = append(w.history[job.Args.Key], job.Args.Type)
	return nil
}

// A pool ordered by key: the events of one key are handled one at a time,
// in the order they were appended, while different keys run in parallel.
func Example_orderedPool() {
	ctx := context.Background()
	t := &exampleT{}
	defer t.done()
	db := riverbustest.NewDatabase(t)

	worker := &LedgerWorker{history: map[string][]string{}}
	ws := workers.NewRegistry()
	workers.Add(ws, worker, &workers.AddOpts{MaxWorkers: 10})
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	if err != nil {
		log.Fatal(err)
	}
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "ledger", Ordering: bustype.OrderingKey})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	var last int64
	for _, e := range []struct{ account, event string }{
		{"acct-1", "AccountOpened"}, {"acct-2", "AccountOpened"}, {"acct-1", "MoneyDeposited"},
		{"acct-2", "MoneyDeposited"}, {"acct-1", "MoneyWithdrawn"}, {"acct-1", "AccountClosed"},
		{"acct-2", "MoneyWithdrawn"},
	} {
		appended, err := outbox.Append(ctx, db, outbox.Event{Type: e.event, Key: e.account, Data: json.RawMessage(`{}`)})
		if err != nil {
			log.Fatal(err)
		}
		last = appended[0].GlobalSequence
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.CheckpointWait(waitCtx, "ledger", last, nil); err != nil {
		log.Fatal(err)
	}

	worker.mu.Lock()
	defer worker.mu.Unlock()
	for _, account := range slices.Sorted(maps.Keys(worker.history)) {
		fmt.Printf("%s: %s\n", account, strings.Join(worker.history[account], ", "))
	}

	// Output:
	// acct-1: AccountOpened, MoneyDeposited, MoneyWithdrawn, AccountClosed
	// acct-2: AccountOpened, MoneyDeposited, MoneyWithdrawn
}
