package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// OrderPlaced is the data of "OrderPlaced" events in their current
// version, 3. Version 1 was {"item": "..."}; version 2 renamed item to sku;
// version 3 added qty.
type OrderPlaced struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type ShippingArgs struct{ workers.Args }

func (ShippingArgs) Kind() string { return "shipping" }

// Handlers of an evolving event type are written for its current version;
// upcasters registered with the handlers bring older events to it.
func ExampleRegistry_Upcast() {
	ctx := context.Background()
	db, drop := exampleDB() // a fresh, migrated test database
	defer drop()

	reg := workers.NewRegistry()
	// 1 → 2: item was renamed sku.
	reg.Upcast("OrderPlaced", 1, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		var v1 struct {
			Item string `json:"item"`
		}
		if err := json.Unmarshal(data, &v1); err != nil {
			return nil, err // the job is retried, then a dead letter: never skipped
		}
		return json.Marshal(map[string]any{"sku": v1.Item})
	})
	// 2 → 3: qty was added; older orders were of one.
	reg.Upcast("OrderPlaced", 2, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		var v2 map[string]any
		if err := json.Unmarshal(data, &v2); err != nil {
			return nil, err
		}
		v2["qty"] = 1
		return json.Marshal(v2)
	})

	shipped := make(chan string, 3)
	workers.Add(reg, river.WorkFunc(func(_ context.Context, job *river.Job[ShippingArgs]) error {
		order, err := workers.Decode[OrderPlaced](job.Args.Event) // always version 3
		if err != nil {
			return err
		}
		shipped <- fmt.Sprintf("event %d, version %d: ship %d × %s", job.Args.GlobalSequence, job.Args.Version, order.Qty, order.SKU)
		return nil
	}), nil)

	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if _, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "shipping", EventTypes: []string{"OrderPlaced"}}); err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx) //nolint:errcheck

	// Events appended by three generations of the application.
	_, err = outbox.Append(ctx, db,
		outbox.Event{Type: "OrderPlaced", Key: "o-1", Data: json.RawMessage(`{"item": "mug"}`)}, // Version 0: 1
		outbox.Event{Type: "OrderPlaced", Key: "o-2", Data: json.RawMessage(`{"sku": "pen"}`), Version: 2},
		outbox.Event{Type: "OrderPlaced", Key: "o-3", Data: json.RawMessage(`{"sku": "cup", "qty": 4}`), Version: 3})
	if err != nil {
		panic(err)
	}

	var lines []string
	for range 3 {
		select {
		case line := <-shipped:
			lines = append(lines, line)
		case <-time.After(20 * time.Second):
			lines = append(lines, "timed out")
		}
	}
	slices.Sort(lines) // the three jobs run in parallel
	for _, line := range lines {
		fmt.Println(line)
	}

	// Output:
	// event 1, version 3: ship 1 × mug
	// event 2, version 3: ship 1 × pen
	// event 3, version 3: ship 4 × cup
}
