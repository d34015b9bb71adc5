package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
)

func ExampleAppendTx() {
	ctx := context.Background()
	db, done := exampleDatabase()
	defer done()

	// The events commit, or not, with the application's own writes.
	tx, err := db.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	// ... the application's own writes in tx ...
	appended, err := outbox.AppendTx(ctx, tx,
		outbox.Event{Type: "OrderPlaced", Key: "order-1", Tags: []string{"order=1", "customer=7"}, Data: json.RawMessage(`{"total": 42}`)},
		outbox.Event{Type: "PaymentRequested", Key: "order-1", Tags: []string{"order=1"}, Data: json.RawMessage(`{"amount": 42}`)},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("appended at", appended[0].GlobalSequence, appended[1].GlobalSequence)

	events, err := outbox.Read(ctx, db, outbox.ReadParams{Query: outbox.Query{{Tags: []string{"customer=7"}}}})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range events {
		fmt.Println(e.GlobalSequence, e.Type, e.Key, e.Tags, string(e.Data))
	}

	_, err = outbox.Append(ctx, db, outbox.Event{Type: "OrderPlaced", Tags: []string{"order"}, Data: json.RawMessage(`{}`)})
	fmt.Println(errors.Is(err, outbox.ErrInvalidEvent), err)
	// Output:
	// appended at 1 2
	// 1 OrderPlaced order-1 [order=1 customer=7] {"total": 42}
	// true outbox: event 0: Tags[0] must be name=value with a non-empty name, got "order"
}

func ExampleAppendIf() {
	ctx := context.Background()
	db, done := exampleDatabase()
	defer done()

	_, err := outbox.Append(ctx, db, outbox.Event{Type: "CourseDefined", Tags: []string{"course=c1"}, Data: json.RawMessage(`{"capacity": 1}`)})
	if err != nil {
		log.Fatal(err)
	}

	// subscribe decides on the events of the course, and appends only if
	// none was appended since it read them.
	subscribe := func(student string) error {
		course := outbox.Query{{Tags: []string{"course=c1"}}}
		events, err := outbox.Read(ctx, db, outbox.ReadParams{Query: course})
		if err != nil {
			return err
		}
		subscribed := 0
		for _, e := range events {
			if e.Type == "StudentSubscribed" {
				subscribed++
			}
		}
		if subscribed >= 1 {
			return errors.New("course is full")
		}
		_, err = outbox.AppendIf(ctx, db,
			outbox.AppendCondition{FailIfEventsMatch: course, After: events[len(events)-1].GlobalSequence},
			outbox.Event{Type: "StudentSubscribed", Tags: []string{"course=c1", "student=" + student}, Data: json.RawMessage(`{}`)})
		return err
	}
	fmt.Println(subscribe("s1"))
	fmt.Println(subscribe("s2"))

	// A decision made on a stale read conflicts.
	_, err = outbox.AppendIf(ctx, db,
		outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"course=c1"}}}, After: 1},
		outbox.Event{Type: "StudentSubscribed", Tags: []string{"course=c1", "student=s3"}, Data: json.RawMessage(`{}`)})
	fmt.Println(errors.Is(err, outbox.ErrConflict), err)

	// A command carrying an idempotency tag appends once.
	pay := outbox.AppendCondition{IdempotencyQuery: outbox.Query{{Tags: []string{"idempotency=req-9"}}}}
	fee := outbox.Event{Type: "FeePaid", Tags: []string{"student=s1", "idempotency=req-9"}, Data: json.RawMessage(`{"amount": 10}`)}
	appended, err := outbox.AppendIf(ctx, db, pay, fee)
	fmt.Println(appended[0].GlobalSequence, err)
	_, err = outbox.AppendIf(ctx, db, pay, fee)
	fmt.Println(errors.Is(err, outbox.ErrDuplicate), err)
	// Output:
	// <nil>
	// course is full
	// true outbox: append condition failed: event 2 matches the query after position 1
	// 3 <nil>
	// true outbox: duplicate: event 3 matches the idempotency query
}

// exampleDatabase returns a pool connected to a fresh, migrated database
// and a function that drops it. Examples have no *testing.T, so it hands
// pgtest a stand-in with the few methods pgtest uses.
func exampleDatabase() (*pgxpool.Pool, func()) {
	tb := &exampleTB{}
	return pgtest.Connect(tb, pgtest.NewDatabase(tb)), tb.cleanup
}

// exampleTB is the testing.TB of an example. The embedded nil interface
// supplies the methods pgtest never calls.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (*exampleTB) Helper()                      {}
func (*exampleTB) Fatal(args ...any)            { log.Fatal(args...) }
func (*exampleTB) Fatalf(f string, args ...any) { log.Fatalf(f, args...) }
func (tb *exampleTB) Cleanup(f func())          { tb.cleanups = append(tb.cleanups, f) }

func (tb *exampleTB) cleanup() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}
