package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// writerLoad appends events from several goroutines, one to eventsPerTx
// events in each transaction, held open for a random time, a share of them
// rolled back. It
// tolerates a database that goes away: a failed transaction is simply not
// counted, and one whose COMMIT failed is checked by event id at the end.
type writerLoad struct {
	mu         sync.Mutex
	committed  map[int64]bool
	ambiguous  []uuid.UUID
	rolledBack int
	wg         sync.WaitGroup
}

type writerOpts struct {
	writers, perWriter int
	rollbackPercent    int
	maxHold            time.Duration
	// eventsPerTx: each transaction appends 1 to eventsPerTx events in one
	// statement (0 or 1: one event).
	eventsPerTx int
	// keys is how many event keys the writers take turns with (0: 20).
	keys int
	typ  func(i int) string
	data func(i int) string
}

// key is the event key of the writers' n-th transaction: key-a to key-t
// with the default 20 keys, key-N beyond.
func (o writerOpts) key(n int) string {
	if o.keys <= 20 {
		return "key-" + string(rune('a'+n%20))
	}
	return fmt.Sprintf("key-%d", n%o.keys)
}

func startWriters(ctx context.Context, db *pgxpool.Pool, o writerOpts) *writerLoad {
	w := &writerLoad{committed: map[int64]bool{}}
	if o.typ == nil {
		o.typ = func(int) string { return "it.event" }
	}
	if o.data == nil {
		o.data = func(int) string { return `{}` }
	}
	for g := range o.writers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; i < o.perWriter && ctx.Err() == nil; {
				n := g*o.perWriter + i
				events := 1
				if o.eventsPerTx > 1 {
					events = 1 + rand.IntN(o.eventsPerTx)
				}
				ids := make([]uuid.UUID, events)
				for k := range ids {
					ids[k] = uuid.New()
				}
				tx, err := db.Begin(ctx)
				if err != nil {
					sleepCtx(ctx, 50*time.Millisecond) // back off while the database is down
					continue
				}
				rows, err := tx.Query(ctx, `INSERT INTO riverbus_event (event_id, type, key, data)
					SELECT id, $2, $3, $4::jsonb FROM unnest($1::uuid[]) AS id RETURNING global_sequence`,
					ids, o.typ(n), o.key(n), o.data(n))
				var seqs []int64
				if err == nil {
					seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
				}
				if err != nil {
					_ = tx.Rollback(context.Background())
					sleepCtx(ctx, 50*time.Millisecond) // back off while the database is down
					continue
				}
				if o.maxHold > 0 {
					// Hold the transaction open: commits come out of order.
					time.Sleep(time.Duration(rand.Int64N(int64(o.maxHold))))
				}
				i++
				if rand.IntN(100) < o.rollbackPercent {
					_ = tx.Rollback(context.Background())
					w.mu.Lock()
					w.rolledBack++
					w.mu.Unlock()
					continue
				}
				err = tx.Commit(context.Background())
				w.mu.Lock()
				if err == nil {
					for _, seq := range seqs {
						w.committed[seq] = true
					}
				} else {
					w.ambiguous = append(w.ambiguous, ids...)
				}
				w.mu.Unlock()
			}
		}()
	}
	return w
}

// wait waits for the writers and returns the committed sequences, with the
// ambiguous commits resolved against the database.
func (w *writerLoad) wait(t *testing.T, db *pgxpool.Pool) map[int64]bool {
	t.Helper()
	w.wg.Wait()
	ctx := context.Background()
	// After a server restart the pool's first queries may still hit dead
	// connections: retry each read.
	retry := func(f func() error) error { return retryFor(10*time.Second, f) }
	for _, id := range w.ambiguous {
		var seq int64
		var found bool
		require.NoError(t, retry(func() error {
			return db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM riverbus_event WHERE event_id = $1),
				coalesce((SELECT global_sequence FROM riverbus_event WHERE event_id = $1), 0)`, id).Scan(&found, &seq)
		}))
		if found {
			w.committed[seq] = true
		}
	}
	// Cross-check: the database holds exactly these events.
	var n int
	require.NoError(t, retry(func() error { return db.QueryRow(ctx, `SELECT count(*) FROM riverbus_event`).Scan(&n) }))
	require.Equal(t, len(w.committed), n, "every committed event is accounted for")
	return w.committed
}
