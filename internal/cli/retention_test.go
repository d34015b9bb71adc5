package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// The operator's path: a dry run by default, a preview of another keep
// period, set, apply, show, and a pool start below the trimmed log refused.
func TestRetentionCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`INSERT INTO riverbus_event (type, data) SELECT 'thing.happened', '{}' FROM generate_series(1, 3)`)
	exec(`UPDATE riverbus_horizon SET horizon = 3`)
	// A pool that starts after them: with no pool at all, nothing is
	// deleted.
	ok(t, run(t, dbURL, "pool", "create", "billing", "--from", "3"))

	r := ok(t, run(t, dbURL, "retention"))
	require.Contains(t, r.stdout, "would delete nothing")
	require.Contains(t, r.stdout, "no policy set")
	require.Contains(t, r.stdout, "River job retention (this process's workers): completed 24h0m0s, cancelled 24h0m0s, discarded forever")

	r = ok(t, run(t, dbURL, "retention", "--keep", "0s"))
	require.Contains(t, r.stdout, "would delete 3 events, sequences 1-3, appended ")
	require.Contains(t, r.stdout, "held by horizon")

	r = run(t, dbURL, "retention", "set")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "exactly one of --keep, --until-consumed and --off")
	r = run(t, dbURL, "retention", "--apply", "--keep", "1h")
	require.Equal(t, 2, r.code)

	r = ok(t, run(t, dbURL, "retention", "set", "--until-consumed"))
	require.Contains(t, r.stdout, "until consumed")
	r = ok(t, run(t, dbURL, "retention"))
	require.Contains(t, r.stdout, "would delete 3 events")
	r = ok(t, run(t, dbURL, "retention", "--apply"))
	require.Contains(t, r.stdout, "deleted 3 events, sequences 1-3")

	r = ok(t, run(t, dbURL, "retention", "show", "--json", "--completed-job-retention", "1h"))
	var shown struct {
		Policy struct {
			Enabled        bool
			TrimmedThrough int64
			EventsTrimmed  int64
		} `json:"policy"`
		River map[string]string `json:"river_job_retention"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	require.True(t, shown.Policy.Enabled)
	require.Equal(t, int64(3), shown.Policy.TrimmedThrough)
	require.Equal(t, int64(3), shown.Policy.EventsTrimmed)
	require.Equal(t, "1h0m0s", shown.River["completed"])

	r = ok(t, run(t, dbURL, "status"))
	require.Contains(t, r.stdout, "events deleted by retention 3 (the log begins after 3)")

	r = run(t, dbURL, "pool", "create", "orders", "--from", "2")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "retention removed every event up to 3")
	r = ok(t, run(t, dbURL, "pool", "create", "orders"))
	r = ok(t, run(t, dbURL, "pool", "show", "orders"))
	require.Contains(t, r.stdout, "3")

	r = ok(t, run(t, dbURL, "retention", "set", "--off"))
	require.Contains(t, r.stdout, "off")
}
