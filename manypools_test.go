package riverbus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/poolmix"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
)

// transactions returns how many transactions the database of db has
// committed and rolled back, as the statistics show them.
func transactions(ctx context.Context, t *testing.T, db *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
	return n
}

// An idle fan-out's cost does not grow with its pools: with 301 pools of
// every kind, caught up and with nothing appended, a fan-out process (the
// horizon, the pools' service, the lane sweeper, the checkpoint advancer,
// with their defaults) runs a handful of transactions a second, not a few
// per pool. Counted over several of its idle horizon polls; the bound is
// generous, since PostgreSQL's statistics reach pg_stat_database a second
// or so late.
func TestIdleFanoutCostDoesNotGrowWithPools(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	client, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	var names []string
	for _, p := range poolmix.Params(300, "InvoiceIssued") {
		_, _, err := client.PoolCreate(ctx, p)
		require.NoError(t, err)
		names = append(names, p.Name)
	}
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "billing", EventTypes: []string{"InvoiceIssued"}})
	require.NoError(t, err)
	names = append(names, "billing")
	appended, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Key: "k", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	seq := appended[0].GlobalSequence

	s, _ := client.InitTestSignals(t)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.WithoutCancel(ctx))) })
	// Caught up: every pool's cursor past the event.
	testwait.Eventually(t, 30*time.Second, func() bool {
		var behind int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM riverbus_pool WHERE cursor_seq < $1`, seq).Scan(&behind))
		return behind == 0
	}, "every pool's cursor at %d", seq)
	require.Len(t, names, 301)

	s.Horizon.TestSignals.RoundDone.Drain()
	began, before := time.Now(), transactions(ctx, t, b.db)
	// Idle horizon rounds come at the poll interval (a second): five of
	// them make a window of about five seconds.
	for range 5 {
		s.Horizon.TestSignals.RoundDone.WaitFor("an idle round", func(fanout.RoundResult) bool { return true })
	}
	took, after := time.Since(began), transactions(ctx, t, b.db)
	rate := float64(after-before) / took.Seconds()
	t.Logf("idle fan-out with %d pools: %d transactions in %s (%.0f/s)", len(names), after-before, took.Round(time.Millisecond), rate)
	require.LessOrEqual(t, rate, 100.0, "an idle fan-out with %d pools ran %.0f transactions a second", len(names), rate)
}
