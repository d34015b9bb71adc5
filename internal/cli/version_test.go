package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// append records the version it is given (1 without one) and refuses one
// out of range as bad input; tail shows each event's version, and dlq show
// the version a dead letter's stored event has.
func TestEventVersionInTheCLI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "append", "--type", "order.placed", "--data", `{"item":"a"}`))
	ok(t, run(t, dbURL, "append", "--type", "order.placed", "--version", "3", "--data", `{"sku":"b","qty":2}`))
	for _, bad := range []string{"0", "-1", "10001"} {
		r := run(t, dbURL, "append", "--type", "order.placed", "--version", bad, "--data", `{}`)
		require.Equal(t, 2, r.code, "--version %s: %s", bad, r.stderr)
		require.Contains(t, r.stderr, "--version must be between 1 and 10000, got "+bad, bad)
	}

	db := pgtest.Connect(t, dbURL)
	f, err := fanout.New(db, nil)
	require.NoError(t, err)
	_, err = f.Pass(ctx) // the horizon passes both events
	require.NoError(t, err)
	// tail follows until stopped: it runs for 3 s, and once more for a
	// minute when a loaded machine kept it from printing both events.
	tail := func(args ...string) string {
		t.Helper()
		var out string
		for _, d := range []time.Duration{3 * time.Second, time.Minute} {
			var buf, errOut bytes.Buffer
			tctx, cancel := context.WithTimeout(ctx, d)
			code := cli.MainContext(tctx, append([]string{"--database-url", dbURL, "tail", "--from", "0"}, args...), &buf, &errOut)
			cancel()
			require.Equal(t, 0, code, errOut.String())
			if out = buf.String(); strings.Count(out, "order.placed") >= 2 {
				break
			}
		}
		return out
	}
	text := tail()
	require.Contains(t, text, `order.placed  version=1  key=  tags=  {"item": "a"}`)
	require.Contains(t, text, `order.placed  version=3  key=  tags=  {"qty": 2, "sku": "b"}`)
	var versions []int
	for line := range strings.Lines(tail("--json")) {
		var e struct{ Version int }
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		versions = append(versions, e.Version)
	}
	require.Equal(t, []int{1, 3}, versions)

	// A dead letter of the version-3 event's job (discarded, as River
	// discards one after its last attempt) shows the stored event.
	ok(t, run(t, dbURL, "pool", "create", "orders"))
	var jobID int64
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, attempt, finalized_at, errors)
		SELECT riverbus_event_envelope(ARRAY[2::bigint])->0, 'orders', 1, 1, 'orders', 'discarded', 1, now(),
			ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', 'upcast failed', 'trace', '')]
		RETURNING id`).Scan(&jobID))
	r := ok(t, run(t, dbURL, "dlq", "show", strconv.FormatInt(jobID, 10)))
	var dl struct {
		Args struct {
			Version int `json:"version"`
			Data    map[string]any
		}
		LastError string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &dl), r.stdout)
	require.Equal(t, 3, dl.Args.Version)
	require.Equal(t, "b", dl.Args.Data["sku"])
	require.Equal(t, "upcast failed", dl.LastError)
}
