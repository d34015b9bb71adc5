package watermill_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/riverbustest"
	rbw "github.com/riverbus/riverbus/watermill"
	"github.com/riverbus/riverbus/workers"
)

// exampleT is the riverbustest.TB of an Example: a failure panics, and the
// cleanups (dropping the test database) run at done.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleT) Cleanup(f func())                { e.cleanups = append(e.cleanups, f) }

func (e *exampleT) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// A Watermill router handles riverbus events: the handler of topic
// "order.placed" publishes to "invoice.requested" (its messages are
// appended in the same way as the application's), and Watermill's
// middleware (a correlation id, retries inside the handler, panic
// recovery) wraps it as it would any Pub/Sub's. A failure left after the
// middleware's retries is a Nack: riverbus retries the message on the
// pool's schedule and, at the last attempt, keeps it as a dead letter.
func Example_router() {
	ctx := context.Background()
	t := &exampleT{}
	defer t.done()
	// A fresh test database; an application connects with pgxpool.New
	// (after riverbus.ConfigurePool) and runs migrations.Up at deploy time.
	db := riverbustest.NewDatabase(t)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	logger := watermill.NopLogger{}

	publisher, err := rbw.NewPublisher(db, rbw.PublisherConfig{Key: rbw.KeyFromMetadata("order_id")}, logger)
	if err != nil {
		panic(err)
	}
	// Each consumer group is a pool per topic; this one delivers an
	// order's messages one at a time, in order.
	subscriber, err := rbw.NewSubscriber(db, rbw.SubscriberConfig{
		ConsumerGroup: "billing",
		Pool:          bustype.PoolParams{Ordering: bustype.OrderingKey},
		RunFanout:     true, // or run `riverbus run` beside the application
		Logger:        quiet,
		Work:          workers.Config{Logger: quiet},
	}, logger)
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(
		middleware.CorrelationID,
		middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware,
		middleware.Recoverer,
	)

	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	router.AddHandler("bill", "order.placed", subscriber, "invoice.requested", publisher,
		func(msg *message.Message) ([]*message.Message, error) {
			ev, _ := rbw.Event(msg) // the riverbus event behind the message
			invoice := message.NewMessage(watermill.NewUUID(), []byte("invoice for "+string(msg.Payload)))
			invoice.Metadata.Set("order_id", msg.Metadata.Get("order_id"))
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s (key %s, type %s)", msg.Payload, ev.Key, ev.Type))
			mu.Unlock()
			return []*message.Message{invoice}, nil
		})
	router.AddNoPublisherHandler("send", "invoice.requested", subscriber, func(msg *message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(msg.Payload))
		if len(seen) == 4 {
			close(done)
		}
		return nil
	})

	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	for _, order := range []string{"order 1", "order 2"} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(order))
		msg.Metadata.Set("order_id", strings.TrimPrefix(order, "order "))
		if err := publisher.Publish("order.placed", msg); err != nil {
			panic(err)
		}
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		panic("the router did not handle the orders")
	}
	_ = router.Close()
	_ = subscriber.Close()

	sort.Strings(seen)
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// invoice for order 1
	// invoice for order 2
	// order 1 (key 1, type order.placed)
	// order 2 (key 2, type order.placed)
}
