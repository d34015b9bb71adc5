package riverbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
)

// appendOne appends one event on db (a pool, or a transaction held open)
// and returns its sequence.
func appendOne(t *testing.T, db outbox.TxBeginner) int64 {
	t.Helper()
	out, err := outbox.Append(context.Background(), db, outbox.Event{Type: "entry.posted", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	return out[0].GlobalSequence
}

// dbNow is the database's clock: the times of a rewind are the database's.
func dbNow(t *testing.T, db *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

// waitForCursor waits until the fan-out has turned every event of pool up
// to seq into a job.
func waitForCursor(t *testing.T, client *riverbus.Client, pool string, seq int64) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, func() bool {
		p, err := client.PoolGet(context.Background(), pool)
		require.NoError(t, err)
		return p.Cursor >= seq
	}, "pool %s's cursor did not reach %d", pool, seq)
}

// jobSequences are the sequences of pool's jobs with ids above after.
func jobSequences(t *testing.T, db *pgxpool.Pool, pool string, after int64) []int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT (args->>'global_sequence')::bigint FROM river_job
		WHERE kind = $1 AND id > $2 ORDER BY 1`, pool, after)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return seqs
}

// A reset to a time T re-delivers exactly the events committed after T,
// among them the event of a transaction that began before T and committed
// after it, whose sequence is below an event appended after T: by when
// their transactions began (appended_at) the reset would skip it. The
// events committed before T are not delivered again. Then the refusals:
// after the database's clock, before the log's first event, and before the
// first mark (history from before riverbus recorded commits), each with
// where the log begins and ends.
func TestPoolResetToTimeRedeliversEveryEventCommittedAfterIt(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	client := riverbustest.StartClient(t, b.db, &riverbus.Config{Fanout: fanout.Config{MarkInterval: time.Millisecond}})
	_, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "ledger"})
	require.NoError(t, err)

	appendOne(t, b.db)
	before := appendOne(t, b.db)
	held, err := b.db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(context.Background()) })
	straddling := appendOne(t, held) // begins before T, commits after it
	require.Equal(t, before+1, straddling)
	// The horizon records that everything up to before had committed.
	testwait.Eventually(t, 30*time.Second, func() bool {
		var through int64
		require.NoError(t, b.db.QueryRow(ctx, `SELECT coalesce(max(committed_through), 0) FROM riverbus_horizon_mark`).Scan(&through))
		return through >= before
	}, "no mark reached sequence %d", before)
	waitForCursor(t, client, "ledger", before)
	at := dbNow(t, b.db)

	after := appendOne(t, b.db)
	require.NoError(t, held.Commit(ctx))
	require.Greater(t, after, straddling)
	waitForCursor(t, client, "ledger", after)

	replay, err := client.PoolReplayStartToTime(ctx, "ledger", at)
	require.NoError(t, err)
	require.Equal(t, before, replay.After, "the position is the last event committed before T")
	require.Equal(t, before, replay.Pool.Cursor)
	require.False(t, replay.MarkAt.After(at), "the mark is at or before T")
	waitForCursor(t, client, "ledger", after)
	require.Equal(t, []int64{straddling, after}, jobSequences(t, b.db, "ledger", replay.JobsAfter),
		"the events committed after T, and only those, are delivered again")

	// PoolResetToTime does the same, and says where it put the pool.
	rewind, err := client.PoolResetToTime(ctx, "ledger", at)
	require.NoError(t, err)
	require.Equal(t, before, rewind.After)
	require.Equal(t, before, rewind.Pool.Cursor)
	require.Equal(t, replay.MarkAt, rewind.MarkAt)
	// The fan-out delivers the two events again; then the pool stays put.
	waitForCursor(t, client, "ledger", after)
	settled, err := client.PoolGet(ctx, "ledger")
	require.NoError(t, err)

	// Refused: a time after the database's clock, and one before the
	// first event was appended. Each error says where the log begins and
	// ends, and leaves the pool where it was.
	var first, last time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT (SELECT appended_at FROM riverbus_event ORDER BY global_sequence LIMIT 1),
		(SELECT appended_at FROM riverbus_event ORDER BY global_sequence DESC LIMIT 1)`).Scan(&first, &last))
	span := "the log holds sequences 1 (appended " + first.UTC().Format(bustype.RewindTimeFormat) + ") to " +
		"4 (appended " + last.UTC().Format(bustype.RewindTimeFormat) + ")"
	for _, c := range []struct {
		at     time.Time
		reason bustype.RewindRefusal
		says   string
	}{
		{dbNow(t, b.db).Add(time.Hour), bustype.RewindAfterEnd, "is after the end of the log: the database's clock reads "},
		{first.Add(-time.Microsecond), bustype.RewindBeforeStart, "is before the start of the log: " + span},
	} {
		_, err := client.PoolResetToTime(ctx, "ledger", c.at)
		var rewindErr *bustype.RewindTimeError
		require.ErrorAs(t, err, &rewindErr)
		require.ErrorIs(t, err, bustype.ErrInvalidPool)
		require.Equal(t, c.reason, rewindErr.Reason)
		require.Contains(t, err.Error(), "reset time "+c.at.UTC().Format(bustype.RewindTimeFormat)+" "+c.says)
		require.Contains(t, err.Error(), span)
		require.Contains(t, err.Error(), "(times in UTC)")
	}
	p, err := client.PoolGet(ctx, "ledger")
	require.NoError(t, err)
	require.Equal(t, settled.Cursor, p.Cursor, "a refused reset moved the pool")

	// History from before the marks (an upgrade from a schema without
	// them): a time there is refused, saying from when rewinds are exact.
	_, err = b.db.Exec(ctx, `DELETE FROM riverbus_horizon_mark WHERE at <= $1`, at)
	require.NoError(t, err)
	var exactFrom time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT min(at) FROM riverbus_horizon_mark`).Scan(&exactFrom))
	_, err = client.PoolResetToTime(ctx, "ledger", at)
	var rewindErr *bustype.RewindTimeError
	require.ErrorAs(t, err, &rewindErr)
	require.Equal(t, bustype.RewindNotExact, rewindErr.Reason)
	require.Contains(t, err.Error(), "cannot be rewound to exactly: riverbus knows which events committed after a time only from "+
		exactFrom.UTC().Format(bustype.RewindTimeFormat)+" on")
	require.True(t, errors.Is(err, bustype.ErrInvalidPool))
	_, err = client.PoolResetToTime(ctx, "ledger", exactFrom)
	require.NoError(t, err, "from the first mark on, rewinds are exact")

	// Status says when the event at the pool's checkpoint was appended.
	st, err := client.Status(ctx)
	require.NoError(t, err)
	sp := st.Pool("ledger")
	require.NotNil(t, sp.CheckpointTime)
	var want time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT appended_at FROM riverbus_event
		WHERE global_sequence <= $1 ORDER BY global_sequence DESC LIMIT 1`, sp.Checkpoint).Scan(&want))
	require.True(t, want.Equal(*sp.CheckpointTime), "checkpoint time %s, want %s", sp.CheckpointTime, want)
}
