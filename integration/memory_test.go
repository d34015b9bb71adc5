package integration_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
)

// An appender decides how big its events are, up to the log's 64 MiB: ten
// big events must not take a `riverbus fanout` process's memory with them,
// on any path. Three pools (plain, transaction-grouped, key-ordered), a
// transaction of two big events, and a big event whose transaction
// outlives the gap timeout (a late event); the process's peak resident set
// (VmHWM) stays under five events' size and every event reaches every pool
// once. The fan-out never holds an event (the database copies the payload
// into the job), so its peak is its own (about 30 MB) whatever the size:
// events of 20 MiB under a 100 MB bound tell a fan-out that holds the
// batch's events from one that holds none as 60 MiB events under 300 MB
// do, in a third of the time (the database writes each event once per
// pool).
func TestFanoutMemoryBoundedWithBigEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	for _, p := range []bustype.PoolParams{
		{Name: "big-plain"},
		{Name: "big-grouped", Grouping: bustype.GroupTransaction},
		{Name: "big-ordered", Ordering: bustype.OrderingKey},
	} {
		_, _, err := pools.Create(ctx, db, p)
		require.NoError(t, err)
	}
	// lz4, PostgreSQL's faster compression, keeps the database's part of
	// the test short on a busy machine; the fan-out's memory does not
	// depend on it.
	_, err := db.Exec(ctx, `ALTER TABLE riverbus_event ALTER COLUMN data SET COMPRESSION lz4;
		ALTER TABLE river_job ALTER COLUMN args SET COMPRESSION lz4`)
	require.NoError(t, err)

	fan := start(t, dbURL, "riverbus", []string{"RIVERBUS_GAP_TIMEOUT=300ms", "RIVERBUS_POLL_INTERVAL=100ms",
		"RIVERBUS_LOG_LEVEL=warn"}, "fanout")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("riverbus fanout: peak resident set %d MB", peakRSS(t, fan.cmd.Process.Pid)>>20)
		}
	})
	began := time.Now()

	// The payload is built by the database, so this process never holds it.
	// 20 MiB of text in one JSON string, varied per event.
	const bigEvent = `INSERT INTO riverbus_event (type, key, data)
VALUES ('big', $1, jsonb_build_object('blob', repeat(md5($1 || $2), 20 << 20 >> 5)))
RETURNING global_sequence`
	var all []int64

	// The late event: its transaction takes a sequence, then stays open
	// until the horizon has skipped it.
	lateTx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lateTx.Rollback(ctx) }()
	var late int64
	require.NoError(t, lateTx.QueryRow(ctx, bigEvent, "late", "0").Scan(&late))
	all = append(all, late)

	// A transaction of two big events and a small one: one group.
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	for i := range 2 {
		var seq int64
		require.NoError(t, tx.QueryRow(ctx, bigEvent, "a", strconv.Itoa(i)).Scan(&seq))
		all = append(all, seq)
	}
	var small int64
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('small', 'a', '{}') RETURNING global_sequence`).Scan(&small))
	all = append(all, small)
	require.NoError(t, tx.Commit(ctx))
	// Six more on their own, on two keys.
	for i := range 6 {
		var seq int64
		key := []string{"a", "b"}[i%2]
		require.NoError(t, db.QueryRow(ctx, bigEvent, key, strconv.Itoa(10+i)).Scan(&seq))
		all = append(all, seq)
	}

	// The horizon passes the late event's sequence by the gap timeout; then
	// it commits, and is delivered late.
	testwait.Eventually(t, 30*time.Second, func() bool {
		var h int64
		require.NoError(t, db.QueryRow(ctx, `SELECT horizon FROM riverbus_horizon`).Scan(&h))
		return h > late
	}, "the horizon skips the open transaction's sequence %d", late)
	t.Logf("%s: appended, late skipped", time.Since(began))
	require.NoError(t, lateTx.Commit(ctx))

	// The tenth big event, after the late one.
	var last int64
	require.NoError(t, db.QueryRow(ctx, bigEvent, "b", "99").Scan(&last))
	all = append(all, last)

	// Every pool has passed every event, the late one included: its
	// batches commit whole, so its jobs are all there. (Polled on the pool
	// rows: reading the jobs' args means decompressing them.)
	testwait.Eventually(t, 6*time.Minute, func() bool {
		var behind int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM riverbus_pool
			WHERE cursor_seq < $1 OR late_events_delivered < 1`, last).Scan(&behind))
		return behind == 0
	}, "every pool passes event %d and delivers the late event", last)
	// Once each, the late one flagged late. The jobs' args are read by the
	// database (a jsonpath, which copies no event): only the sequences come
	// back.
	slices.Sort(all)
	for _, pool := range []string{"big-plain", "big-grouped", "big-ordered"} {
		path := "$.global_sequence"
		if pool == "big-grouped" {
			path = "$.events[*].global_sequence"
		}
		rows, err := db.Query(ctx, `SELECT s::bigint, jsonb_path_exists(j.args, '$.late ? (@ == true)')
			FROM river_job j, jsonb_path_query(j.args, $2::jsonpath) AS s WHERE j.kind = $1`, pool, path)
		require.NoError(t, err)
		var got []int64
		var seq int64
		var flagged bool
		_, err = pgx.ForEachRow(rows, []any{&seq, &flagged}, func() error {
			got = append(got, seq)
			require.Equal(t, seq == late, flagged, "pool %s: event %d flagged late", pool, seq)
			return nil
		})
		require.NoError(t, err)
		slices.Sort(got)
		require.Equal(t, all, got, "pool %s: one job per event", pool)
	}
	t.Logf("%s: delivered", time.Since(began))
	var dead int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM riverbus_dead_letter`).Scan(&dead))
	require.Zero(t, dead, "dead letters")

	hwm := peakRSS(t, fan.cmd.Process.Pid)
	t.Logf("riverbus fanout: peak resident set %d MB", hwm>>20)
	require.Less(t, hwm, int64(100<<20), "the fan-out's peak resident set (VmHWM)")
	fan.stop()
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
