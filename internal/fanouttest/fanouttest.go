// Package fanouttest holds the helpers that the fan-out's and the
// horizon's tests share: a Fanout run by the test, events appended and
// held open, the jobs a pool got, the horizon, and the services' test
// signals and test clock. Tests only.
package fanouttest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pools"
)

// QuietLogger logs nothing.
func QuietLogger() *slog.Logger {
	return slog.New(slog.DiscardHandler)
}

// NewFanout returns a Fanout over db with a quiet logger and, unless cfg
// sets one, a 50 ms poll interval.
func NewFanout(t *testing.T, db *pgxpool.Pool, cfg fanout.Config) *fanout.Fanout {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = QuietLogger()
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	f, err := fanout.New(db, &cfg)
	require.NoError(t, err)
	return f
}

// Clock gives f's horizon a test clock (fanout.Clock) and returns it.
func Clock(f *fanout.Fanout) *fanout.Clock {
	c := &fanout.Clock{}
	f.Services().Horizon.UseClock(c)
	return c
}

// InitSignals makes the test signals of f's services record values. Call
// it before RunFanout.
func InitSignals(t *testing.T, f *fanout.Fanout) *fanout.Services {
	s := f.Services()
	s.Horizon.TestSignals.Init(t)
	s.Pools.TestSignals.Init(t)
	s.Sweeper.TestSignals.Init(t)
	s.Retirer.TestSignals.Init(t)
	return s
}

// RunFanout runs f in the background until the test ends.
func RunFanout(t *testing.T, f *fanout.Fanout) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
}

// Pass runs one f.Pass and requires it to succeed.
func Pass(t *testing.T, f *fanout.Fanout) fanout.PassResult {
	t.Helper()
	res, err := f.Pass(context.Background())
	require.NoError(t, err)
	return res
}

// CreatePool creates a pool.
func CreatePool(t *testing.T, db *pgxpool.Pool, params bustype.PoolParams) *bustype.Pool {
	t.Helper()
	p, _, err := pools.Create(context.Background(), db, params)
	require.NoError(t, err)
	return p
}

// InsertEvent appends an event of type $1, key $2 and tags $3, and returns
// its sequence.
const InsertEvent = `INSERT INTO riverbus_event (type, key, tags, data) VALUES ($1, $2, $3, '{"n": 1}') RETURNING global_sequence`

// AppendEvent appends an event of typ with key "k" and returns its
// sequence.
func AppendEvent(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, typ string, tags ...string) int64 {
	t.Helper()
	if tags == nil {
		tags = []string{}
	}
	var seq int64
	require.NoError(t, db.QueryRow(context.Background(), InsertEvent, typ, "k", tags).Scan(&seq))
	return seq
}

// OpenWriter starts a transaction that appends one event and holds it.
func OpenWriter(t *testing.T, db *pgxpool.Pool) (pgx.Tx, int64) {
	t.Helper()
	tx, err := db.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	// The writer stays open for as long as its test needs, which a
	// database's idle-in-transaction timeout (newStrictDatabase's 5 s, set
	// for riverbus's sessions) must not cut short on a loaded machine.
	_, err = tx.Exec(context.Background(), "SET LOCAL idle_in_transaction_session_timeout = 0")
	require.NoError(t, err)
	return tx, AppendEvent(t, tx, "held")
}

// Jobs returns, per global sequence, how many jobs pool has and whether any
// is flagged late.
func Jobs(t *testing.T, db *pgxpool.Pool, pool string) (map[int64]int, map[int64]bool) {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT (args->>'global_sequence')::bigint, coalesce((args->>'late')::boolean, false) FROM river_job WHERE kind = $1`, pool)
	require.NoError(t, err)
	counts, late := map[int64]int{}, map[int64]bool{}
	for rows.Next() {
		var seq int64
		var l bool
		require.NoError(t, rows.Scan(&seq, &l))
		counts[seq]++
		late[seq] = late[seq] || l
	}
	require.NoError(t, rows.Err())
	return counts, late
}

// Horizon reads the horizon's status.
func Horizon(t *testing.T, db *pgxpool.Pool) *horizon.Status {
	t.Helper()
	h, err := horizon.Get(context.Background(), db)
	require.NoError(t, err)
	return h
}
