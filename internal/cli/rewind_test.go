package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// `pool reset --to-time`: a time that does not parse as RFC 3339 with its
// offset, both --to and --to-time, or neither, is bad input (exit 2), and
// so is a time the log cannot answer, whose error says where the log
// begins and ends. A time it can answer resets the pool and says where it
// put it, in UTC whatever offset was given; status then shows the time
// of the pool's checkpoint, in the table and in JSON.
func TestPoolResetToTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	ok(t, run(t, dbURL, "pool", "create", "billing"))
	for range 3 {
		ok(t, run(t, dbURL, "append", "--type", "invoice.created", "--data", `{}`))
	}
	var now, second time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT now(), (SELECT appended_at FROM riverbus_event WHERE global_sequence = 2)`).Scan(&now, &second))

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--to-time", "2026-11-20T10:00:00"}, `--to-time must be an RFC 3339 time with its offset, such as 2026-11-20T10:00:00Z or 2026-11-20T11:00:00+01:00, got "2026-11-20T10:00:00"`},
		{[]string{"--to-time", "yesterday"}, `--to-time must be an RFC 3339 time with its offset`},
		{[]string{"--to-time", now.Format(time.RFC3339), "--to", "0"}, "--to and --to-time are mutually exclusive"},
		{nil, "give --to SEQ (a sequence) or --to-time TIME (a time)"},
		{[]string{"--to-time", now.Add(time.Hour).Format(time.RFC3339Nano)}, "is after the end of the log: the database's clock reads "},
	} {
		r := run(t, dbURL, append([]string{"pool", "reset", "billing"}, c.args...)...)
		require.Equal(t, 2, r.code, "%v\nstdout: %s\nstderr: %s", c.args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, c.says, c.args)
		require.NotContains(t, r.stdout, "will be fanned out again")
	}
	r := run(t, dbURL, "pool", "reset", "billing", "--to-time", now.Add(time.Hour).Format(time.RFC3339Nano))
	require.Contains(t, r.stderr, "the log holds sequences 1 (appended ")
	require.Contains(t, r.stderr, ") to 3 (appended ")
	require.Contains(t, r.stderr, "(times in UTC)")

	// The time given with an offset is said back in UTC.
	at := now.In(time.FixedZone("", 3600)).Format(time.RFC3339Nano)
	r = ok(t, run(t, dbURL, "pool", "reset", "billing", "--to-time", at))
	require.Contains(t, r.stdout, "pool billing reset to "+now.UTC().Format("2006-01-02T15:04:05.999999Z07:00")+": events after ")
	require.Contains(t, r.stdout, "will be fanned out again: every event committed after that time")

	ok(t, run(t, dbURL, "pool", "reset", "billing", "--to", "2"))
	r = ok(t, run(t, dbURL, "status"))
	require.Contains(t, r.stdout, "CHECKPOINT TIME")
	require.Regexp(t, `(?m)^billing\s.*\s`+second.UTC().Format(time.RFC3339)+`\s`, r.stdout)
	r = ok(t, run(t, dbURL, "status", "--json"))
	var st struct {
		Pools []struct {
			CheckpointTime time.Time `json:"checkpoint_time"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.True(t, second.Equal(st.Pools[0].CheckpointTime), "checkpoint_time %s, want %s", st.Pools[0].CheckpointTime, second)
}
