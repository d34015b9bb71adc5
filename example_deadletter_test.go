package riverbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// ShippingArgs are the jobs of pool "shipping".
type ShippingArgs struct{ workers.Args }

func (ShippingArgs) Kind() string { return "shipping" }

// ShippingWorker books a shipment with a carrier, which is down until
// carrierUp is set.
type ShippingWorker struct {
	river.WorkerDefaults[ShippingArgs]
	carrierUp atomic.Bool
	shipped   chan string
}

func (w *ShippingWorker) Work(ctx context.Context, job *river.Job[ShippingArgs]) error {
	if !w.carrierUp.Load() {
		return errors.New("carrier API unavailable")
	}
	w.shipped <- fmt.Sprintf("shipped %s (event %d)", job.Args.Key, job.Args.GlobalSequence)
	return nil
}

// A job that fails its last attempt becomes a dead letter: kept, with its
// errors, until it is retried (once the cause is fixed) or purged.
func ExampleClient_DeadLetterRetry() {
	ctx := context.Background()
	t := &exampleT{}
	defer t.done()
	db := riverbustest.NewDatabase(t)

	worker := &ShippingWorker{shipped: make(chan string, 1)}
	ws := workers.NewRegistry()
	workers.Add(ws, worker, nil)
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
	if err != nil {
		log.Fatal(err)
	}
	// One attempt per job, so the example needs no retry backoff.
	if _, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "shipping", MaxAttempts: 1}); err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	appended, err := outbox.Append(ctx, db, outbox.Event{Type: "OrderPlaced", Key: "order-7", Data: json.RawMessage(`{}`)})
	if err != nil {
		log.Fatal(err)
	}
	// A dead letter is finished, as far as the checkpoint goes.
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.CheckpointWait(waitCtx, "shipping", appended[0].GlobalSequence, nil); err != nil {
		log.Fatal(err)
	}

	dead, err := client.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "shipping"})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("dead letter: event %d %s %s, attempt %d/%d: %s\n",
			d.GlobalSequence, d.EventType, d.EventKey, d.Attempt, d.MaxAttempts, d.LastError)
	}

	// The carrier is back: retry the dead letter.
	worker.carrierUp.Store(true)
	retried, err := client.DeadLetterRetry(ctx, dead[0].JobID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retry:", retried.Action)
	select {
	case msg := <-worker.shipped:
		fmt.Println(msg)
	case <-waitCtx.Done():
		log.Fatal("the retried job did not run")
	}
	dead, err = client.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "shipping"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letters left:", len(dead))

	// Output:
	// dead letter: event 1 OrderPlaced order-7, attempt 1/1: carrier API unavailable
	// retry: requeued
	// shipped order-7 (event 1)
	// dead letters left: 0
}
