package cli_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// hostile is text an appender or a handler's error can carry: it clears
// the screen, returns the cursor and forges a log line, and reverses the
// rest of the line.
const hostile = "inv\x1b[2J\r\ntime=2026-01-01 level=ERROR msg=\"forged\"\u202eexe.\u009b31m"

// requireEscaped fails when out holds a raw control character or a
// reordering mark, and checks the hostile text shows escaped.
func requireEscaped(t *testing.T, out string) {
	t.Helper()
	for _, raw := range []string{"\x1b", "\r", "\u202e", "\u009b"} {
		require.NotContains(t, out, raw, "raw %q in output:\n%s", raw, out)
	}
	require.NotContains(t, out, "\nlevel=ERROR")
	require.NotContains(t, out, "\ntime=2026")
	require.Contains(t, out, `\x1b[2J\x0d\x0atime=2026`)
}

// Event text and handlers' errors reach operators' terminals through
// status and dlq list: escaped, so they cannot rewrite the screen or
// forge lines.
func TestHumanOutputEscapesEventText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	ok(t, run(t, dbURL, "pool", "create", "billing"))
	_, err := db.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ($1, $1, '{}')`, hostile)
	require.NoError(t, err)
	f, err := fanout.New(db, &fanout.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = f.Pass(ctx)
	require.NoError(t, err)
	// The handler's last attempt failed with the same text, and the job is a
	// dead letter.
	tag, err := db.Exec(ctx, `UPDATE river_job SET state = 'discarded', attempt = 1, finalized_at = now(),
		errors = ARRAY[jsonb_build_object('at', now(), 'attempt', 1, 'error', $1::text)] WHERE kind = 'billing'`, hostile)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	r := ok(t, run(t, dbURL, "dlq", "list"))
	requireEscaped(t, r.stdout)
	r = ok(t, run(t, dbURL, "status"))
	require.NotContains(t, r.stdout, "\x1b")
	require.NotContains(t, r.stdout, "\r")
	require.Contains(t, r.stdout, `\x1b[2J`)
	// JSON output stays exact.
	r = ok(t, run(t, dbURL, "dlq", "list", "--json"))
	require.NotContains(t, r.stdout, "\x1b")
	require.Contains(t, r.stdout, `\u001b[2J`)
	require.True(t, strings.Contains(r.stdout, `\r\n`))
}
