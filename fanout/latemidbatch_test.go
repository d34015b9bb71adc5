package fanout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/fanouttest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
)

type hookTracer struct{ onEventsRead func() }

type eventsReadKey struct{}

func (h *hookTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM riverbus_event e\nWHERE e.global_sequence > $1 AND e.global_sequence <= $2") {
		return context.WithValue(ctx, eventsReadKey{}, true)
	}
	return ctx
}

func (h *hookTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(eventsReadKey{}) != nil && h.onEventsRead != nil {
		f := h.onEventsRead
		h.onEventsRead = nil
		f()
	}
}

// A skipped sequence that commits between the batch's read of (cursor, H]
// and its "record skipped sequences passed" insert.
func TestLateEventCommittedMidBatch(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, url)
	// A key-ordered pool takes the general path (batch.go), whose read of
	// (cursor, H] and record of the skipped sequences it read are two
	// statements. (A plain pool's batch is one statement, one snapshot; it
	// stays on the plain path while the skipped range holds no committed
	// event, so the hook below would never fire for it.)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "pp", Ordering: bustype.OrderingKey})
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	tr := &hookTracer{}
	cfg.ConnConfig.Tracer = tr
	fdb, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer fdb.Close()
	f, err := fanout.New(fdb, &fanout.Config{GapTimeout: time.Hour})
	require.NoError(t, err)
	clock := fanouttest.Clock(f)

	a, err := db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Rollback(ctx) })
	var x, y int64
	require.NoError(t, a.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', 'k', '{}') RETURNING global_sequence`).Scan(&x))
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', 'k', '{}') RETURNING global_sequence`).Scan(&y))
	_, err = f.Pass(ctx) // records the gap at x
	require.NoError(t, err)
	clock.Advance(time.Hour)                                       // past the gap timeout
	tr.onEventsRead = func() { require.NoError(t, a.Commit(ctx)) } // x commits right after the batch read (cursor, H]
	_, err = f.Pass(ctx)                                           // skips x, fans out y
	require.NoError(t, err)
	for range 5 {
		_, err = f.Pass(ctx)
		require.NoError(t, err)
	}
	h := horizon(t, db)
	t.Logf("x=%d y=%d horizon=%+v", x, y, h)
	rows, err := db.Query(ctx, `SELECT (args->>'global_sequence')::bigint FROM river_job WHERE kind = 'pp' ORDER BY 1`)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{x, y}, seqs, "both events have a job")
}
