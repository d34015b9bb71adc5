package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
)

// `riverbus backfill` of 20,000 rows, killed -9 midway and run again,
// while writers append live events and a `riverbus fanout` process
// delivers: exactly one event per row, each delivered once to a pool that
// sees only the backfill, and every live event delivered once to a pool
// that sees only live events (it filters on their type).
func TestBackfillKilledMidwayAppendsEachRowOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	const rows = 20_000
	_, err := db.Exec(ctx, `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, created timestamptz NOT NULL)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO users SELECT i, 'user' || i || '@example.com', now() - i * interval '1 minute' FROM generate_series(1, $1::int) AS i`, rows)
	require.NoError(t, err)
	for _, p := range []bustype.PoolParams{
		{Name: "imported", Tags: []string{outbox.BackfillTag("users")}},
		{Name: "live", EventTypes: []string{"it.event"}},
	} {
		_, _, err := createPool(ctx, db, p)
		require.NoError(t, err)
	}
	fan := start(t, dbURL, "riverbus", []string{"RIVERBUS_POLL_INTERVAL=100ms", "RIVERBUS_LOG_LEVEL=info"}, "fanout").readyOn("fan-out started")

	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	load := startWriters(wctx, db, writerOpts{writers: 2, perWriter: 1 << 30, rollbackPercent: 10, maxHold: 5 * time.Millisecond})

	backfill := func(extra ...string) *proc {
		args := append([]string{"backfill", "--type", "user.imported", "--name", "users", "--batch-size", "1000", "--progress-every", "1s",
			"--query", `SELECT id, 'user-' || id AS key, jsonb_build_object('email', email) AS data, created AS occurred_at FROM users`}, extra...)
		return start(t, dbURL, "riverbus", nil, args...)
	}
	// The rate leaves the run seconds to go when it is killed, however fast
	// the machine: nothing here is timed.
	first := backfill("--rate", "4000")
	appended := func() int64 {
		var n int64
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce((SELECT rows_appended FROM riverbus_backfill WHERE name = 'users'), 0)`).Scan(&n))
		return n
	}
	testwait.Eventually(t, 2*time.Minute, func() bool { return appended() >= rows/4 }, "a quarter of the rows appended")
	require.True(t, first.kill9(), "the first run was still running when killed: %s", first.describe(false))
	killedAt := appended()
	require.Less(t, killedAt, int64(rows), "killed midway")
	t.Logf("killed the first run after %d rows", killedAt)

	second := backfill()
	select {
	case <-second.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the second run did not finish: %s", second.describe(true))
	}
	require.NoError(t, second.err, "%s", second.describe(false))
	out := second.out.String()
	require.Contains(t, out, fmt.Sprintf("backfill users: resuming after id %d (%d rows appended by earlier runs)", killedAt, killedAt))
	require.Contains(t, out, fmt.Sprintf("backfill users: finished: %d events appended, 0 rows already there", rows-killedAt))
	stopWriters()
	t.Logf("second run: %s", lastLine(out))

	// Exactly one event per row: as many events as rows, whose row ids are
	// that many distinct ids from 1 up.
	var events, distinct, lowest, highest int64
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*), count(DISTINCT metadata->>'backfill_id'),
		min((metadata->>'backfill_id')::bigint), max((metadata->>'backfill_id')::bigint)
		FROM riverbus_event WHERE tags @> ARRAY[$1]`, outbox.BackfillTag("users")).Scan(&events, &distinct, &lowest, &highest))
	require.Equal(t, []int64{rows, rows, 1, rows}, []int64{events, distinct, lowest, highest})

	seqRows, err := db.Query(ctx, `SELECT global_sequence FROM riverbus_event WHERE type = 'user.imported'`)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(seqRows, pgx.RowTo[int64])
	require.NoError(t, err)
	backfilled := map[int64]bool{}
	for _, s := range seqs {
		backfilled[s] = true
	}
	// The writers' committed events, with the backfill's added for the
	// writers' cross-check against the log.
	load.mu.Lock()
	for s := range backfilled {
		load.committed[s] = true
	}
	load.mu.Unlock()
	committed := load.wait(t, db)
	live := len(committed) - len(backfilled)
	require.Positive(t, live)
	t.Logf("%d live events committed beside the backfill", live)

	testwait.Eventually(t, 5*time.Minute, func() bool {
		return len(jobCounts(t, db, "imported")) >= rows && len(jobCounts(t, db, "live")) >= live
	}, "every event fanned out to its pool")
	for pool, want := range map[string]func(int64) bool{
		"imported": func(s int64) bool { return backfilled[s] },
		"live":     func(s int64) bool { return committed[s] && !backfilled[s] },
	} {
		counts := jobCounts(t, db, pool)
		n := live
		if pool == "imported" {
			n = rows
		}
		require.Len(t, counts, n, pool)
		for seq, jobs := range counts {
			require.True(t, want(seq), "pool %s: a job of sequence %d, which is not its", pool, seq)
			require.Equal(t, 1, jobs, "pool %s: sequence %d has %d jobs", pool, seq, jobs)
		}
	}
	fan.stop()
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
