package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is what an outbox test works with.
type testBundle struct {
	db    *pgxpool.Pool // a pool on a database of the test's own, migrated
	dbURL string        // that database, for connections outside the pool
}

// setup gives the test a fresh database with no events.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	return context.Background(), &testBundle{db: pgtest.Connect(t, dbURL), dbURL: dbURL}
}

// event returns a valid event of type typ with tags.
func event(typ string, tags ...string) outbox.Event {
	return outbox.Event{Type: typ, Tags: tags, Data: json.RawMessage(`{"n":1}`)}
}

// countEvents returns the number of rows in riverbus_event.
func countEvents(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), "SELECT count(*) FROM riverbus_event").Scan(&n))
	return n
}

// sequences returns the sequences of events.
func sequences(events []outbox.Event) []int64 {
	seqs := []int64{}
	for _, e := range events {
		seqs = append(seqs, e.GlobalSequence)
	}
	return seqs
}

// raceResult is what one racer of race got.
type raceResult struct {
	appended []outbox.Appended
	err      error
}

// race runs f in n goroutines, each in its own transaction on its own
// connection, started together once all n have begun their transaction. A
// transaction commits when f returns nil, rolls back otherwise.
func race(t *testing.T, db *pgxpool.Pool, n int, f func(ctx context.Context, tx pgx.Tx, i int) ([]outbox.Appended, error)) []raceResult {
	t.Helper()
	ctx := context.Background()
	results := make([]raceResult, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			tx, err := db.Begin(ctx)
			ready.Done()
			if err != nil {
				results[i].err = fmt.Errorf("begin: %w", err)
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			<-start
			results[i].appended, results[i].err = f(ctx, tx, i)
			if results[i].err == nil {
				results[i].err = tx.Commit(ctx)
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return results
}

// winner returns the index of the only racer that succeeded and requires
// every other to have failed with target.
func winner(t *testing.T, results []raceResult, target error) int {
	t.Helper()
	won := -1
	for i, r := range results {
		if r.err == nil {
			require.Equal(t, -1, won, "more than one racer succeeded: %d and %d", won, i)
			won = i
			continue
		}
		require.True(t, errors.Is(r.err, target), "racer %d: %v", i, r.err)
	}
	require.NotEqual(t, -1, won, "no racer succeeded")
	return won
}
