package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// A start point beyond the end of the log is an operator's typo that would
// make the pool skip the events that get the numbers in between: `pool
// reset --to` and `pool create --from` refuse it with exit 2, saying where
// the log ends, and leave the pool as it was. Up to the last sequence
// handed out is allowed.
func TestPoolStartBeyondTheLogRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)

	r := run(t, dbURL, "pool", "create", "early", "--from", "1")
	require.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "start sequence 1 is beyond the end of the log (no event appended yet)")

	ok(t, run(t, dbURL, "pool", "create", "billing"))
	for range 3 {
		ok(t, run(t, dbURL, "append", "--type", "invoice.created", "--data", `{}`))
	}

	r = run(t, dbURL, "pool", "reset", "billing", "--to", "999999")
	require.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, `reset pool "billing": invalid pool: reset position 999999 is beyond the end of the log (last sequence handed out 3)`)
	require.Contains(t, r.stderr, "the next 999996 events appended would never reach the pool")
	require.NotContains(t, r.stdout, "will be fanned out again")
	var cursor, startAfter, checkpoints int64
	require.NoError(t, db.QueryRow(ctx, `SELECT cursor_seq, start_after, (SELECT count(*) FROM riverbus_pool_checkpoint WHERE pool = name)
		FROM riverbus_pool WHERE name = 'billing'`).Scan(&cursor, &startAfter, &checkpoints))
	require.Equal(t, []int64{0, 0, 0}, []int64{cursor, startAfter, checkpoints}, "the refused reset moved nothing")

	r = run(t, dbURL, "pool", "create", "future", "--from", "5000000")
	require.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, `create pool "future": invalid pool: start sequence 5000000 is beyond the end of the log (last sequence handed out 3)`)
	r = ok(t, run(t, dbURL, "pool", "list"))
	require.NotContains(t, r.stdout, "future")

	// The end of the log itself is a start point like `--from now`.
	r = ok(t, run(t, dbURL, "pool", "reset", "billing", "--to", "3"))
	require.Contains(t, r.stdout, "events after 3 will be fanned out again")
	r = ok(t, run(t, dbURL, "pool", "create", "present", "--from", "3"))
	require.Contains(t, r.stdout, "starts after sequence 3")
}

// A pool whose position is above the end of the log (made before the
// check above, or by plain SQL) is flagged by status, in text and JSON.
func TestStatusFlagsPoolAheadOfTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	ok(t, run(t, dbURL, "pool", "create", "billing"))
	ok(t, run(t, dbURL, "pool", "create", "audit"))
	for range 3 {
		ok(t, run(t, dbURL, "append", "--type", "invoice.created", "--data", `{}`))
	}
	_, err := db.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 3;
		UPDATE riverbus_pool SET cursor_seq = 3 WHERE name = 'audit';
		UPDATE riverbus_pool SET cursor_seq = 999999, start_after = 999999 WHERE name = 'billing'`)
	require.NoError(t, err)

	r := ok(t, run(t, dbURL, "status", "--json"))
	var st struct {
		Pools []struct {
			Name       string `json:"name"`
			AheadOfLog int64  `json:"ahead_of_log"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	ahead := map[string]int64{}
	for _, p := range st.Pools {
		ahead[p.Name] = p.AheadOfLog
	}
	require.Equal(t, map[string]int64{"audit": 0, "billing": 999996}, ahead)

	r = ok(t, run(t, dbURL, "status"))
	require.Contains(t, r.stdout, "billing: AHEAD OF THE LOG: cursor 999999 is above the last sequence handed out (3)")
	require.Equal(t, 1, strings.Count(r.stdout, "AHEAD OF THE LOG"), r.stdout)
}

// `pool create --types` (and update) naming a type no event in the log has
// warns on stderr, and still creates the pool.
func TestPoolTypesNeverAppendedWarns(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "append", "--type", "order.placed", "--data", `{}`))

	r := ok(t, run(t, dbURL, "pool", "create", "orders", "--types", "order.placed,order.plcaed"))
	require.Contains(t, r.stdout, "created pool orders")
	require.Contains(t, r.stderr, `warning: no event of type "order.plcaed" is in the log yet`)
	require.NotContains(t, r.stderr, `"order.placed"`)

	r = ok(t, run(t, dbURL, "pool", "update", "orders", "--types", "order.placed,order.shiped"))
	require.Contains(t, r.stderr, `warning: no event of type "order.shiped" is in the log yet`)

	r = ok(t, run(t, dbURL, "pool", "create", "all-orders"))
	require.Empty(t, r.stderr)
}
