package riverbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// JournalArgs are the jobs of pool "journal".
type JournalArgs struct{ workers.Args }

func (JournalArgs) Kind() string { return "journal" }

// JournalWorker books each event.
type JournalWorker struct {
	river.WorkerDefaults[JournalArgs]
}

func (JournalWorker) Work(context.Context, *river.Job[JournalArgs]) error { return nil }

// Event retention deletes the events every pool has passed, under the
// policy an operator sets; a dry run says what it would delete first.
func ExampleClient_RetentionTrim() {
	ctx := context.Background()
	t := &exampleT{}
	defer t.done()
	db := riverbustest.NewDatabase(t)

	ws := workers.NewRegistry()
	workers.Add(ws, JournalWorker{}, nil)
	// The example trims by hand; a process normally applies the policy
	// every Retention.Interval.
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws, Retention: riverbus.RetentionConfig{Interval: -1}})
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "journal"}); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	var last int64
	for _, key := range []string{"acct-1", "acct-2", "acct-3"} {
		appended, err := outbox.Append(ctx, db, outbox.Event{Type: "Booked", Key: key, Data: json.RawMessage(`{}`)})
		if err != nil {
			log.Fatal(err)
		}
		last = appended[0].GlobalSequence
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.CheckpointWait(waitCtx, "journal", last, nil); err != nil {
		log.Fatal(err)
	}

	// Dry run: what "until consumed" would delete now.
	untilConsumed := time.Duration(0)
	plan, err := client.RetentionPlan(ctx, &riverbus.RetentionOpts{Keep: &untilConsumed})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("would delete %d events (%d-%d); the floor is %d\n", plan.Events, plan.From+1, plan.Through, plan.Floor)

	if _, err := client.RetentionSet(ctx, true, 0); err != nil {
		log.Fatal(err)
	}
	done, err := client.RetentionTrim(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("deleted %d events; the log begins after %d\n", done.Events, done.Policy.TrimmedThrough)

	// A pool created from the beginning starts where the log begins.
	p, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "reports"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reports starts after", p.StartAfter)

	// Output:
	// would delete 3 events (1-3); the floor is 3
	// deleted 3 events; the log begins after 3
	// reports starts after 3
}
