package fanout_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/testwait"
)

// A batch takes at most BatchSize events and stops before the event whose
// stored bytes would take it past BatchBytes (taking at least one), on
// every path: late events, the plain path, ordered and grouped pools. And
// every event still reaches every pool once.
func TestBatchBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	names := []string{"plain", "keyed", "grouped"}
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	createPool(t, b.db, bustype.PoolParams{Name: "grouped", Grouping: bustype.GroupTransaction})
	var (
		mu      sync.Mutex
		batches []fanout.BatchResult
	)
	f := newFanout(t, b.db, fanout.Config{BatchSize: 4, BatchBytes: 2500, GapTimeout: time.Hour,
		OnBatch: func(r fanout.BatchResult) {
			mu.Lock()
			defer mu.Unlock()
			batches = append(batches, r)
		}})
	clock := fanouttest.Clock(f)
	drainAll := func() {
		t.Helper()
		for pass(t, f).More {
		}
		pass(t, f)
	}
	taken := func() []fanout.BatchResult {
		mu.Lock()
		defer mu.Unlock()
		out := batches
		batches = nil
		return out
	}

	// Late events: a transaction of seven holds its sequences past the gap
	// timeout, then commits.
	held, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	var all []int64
	for range 7 {
		all = append(all, appendEvent(t, held, "held"))
	}
	all = append(all, appendEvent(t, b.db, "after"))
	pass(t, f) // records the gap
	clock.Advance(time.Hour)
	testwait.Eventually(t, time.Minute, func() bool {
		pass(t, f)
		return horizon(t, b.db).GapsSkipped > 0
	}, "the held sequences skipped")
	drainAll()
	taken()
	require.NoError(t, held.Commit(ctx))
	drainAll()
	lateBatches := 0
	for _, r := range taken() {
		require.LessOrEqual(t, r.Late, 4, "late events in one batch of %s", r.Pool)
		if r.Late > 0 && r.Pool == "keyed" {
			lateBatches++
		}
	}
	require.Equal(t, 2, lateBatches, "the seven late events took two batches of the keyed pool")

	// Events of about 1,000 bytes as stored: three fit 2,500 bytes (the
	// fourth would start past it). One of 5,000 is a batch of its own.
	for i := range 6 {
		var seq int64
		data := `jsonb_build_object('s', repeat(md5($1), 30))`
		if i == 3 {
			data = `jsonb_build_object('s', (SELECT string_agg(md5(random()::text || g || $1), '') FROM generate_series(1, 160) g))`
		}
		require.NoError(t, b.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('sized', 'k', `+data+`)
			RETURNING global_sequence`, strconv.Itoa(i)).Scan(&seq))
		all = append(all, seq)
	}
	drainAll()
	for _, r := range taken() {
		require.LessOrEqual(t, r.Jobs, 3, "jobs in one batch of %s: %+v", r.Pool, r)
	}
	require.True(t, f.UsesPlainPath("plain"), "the plain path took part")

	for _, pool := range names {
		got := map[int64]int{}
		rows, err := b.db.Query(ctx, `SELECT coalesce(e->>'global_sequence', j.args->>'global_sequence')::bigint
			FROM river_job j LEFT JOIN LATERAL jsonb_array_elements(j.args->'events') e ON true WHERE j.kind = $1`, pool)
		require.NoError(t, err)
		for rows.Next() {
			var seq int64
			require.NoError(t, rows.Scan(&seq))
			got[seq]++
		}
		require.NoError(t, rows.Err())
		require.Len(t, got, len(all), pool)
		for _, seq := range all {
			require.Equal(t, 1, got[seq], "%s: event %d", pool, seq)
		}
	}
}
