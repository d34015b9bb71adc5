package cli_test

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// backfillDB is a database with a table of n customers (ids 1 to n).
func backfillDB(t *testing.T, n int) (dbURL string, count func(sql string) int) {
	t.Helper()
	ctx := context.Background()
	dbURL = pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `CREATE TABLE customers AS SELECT i AS id, 'c' || i AS name FROM generate_series(1, $1::int) AS i`, n)
	require.NoError(t, err)
	return dbURL, func(sql string) int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
		return n
	}
}

const customersQuery = `SELECT id, name AS key, jsonb_build_object('name', name) AS data FROM customers`

// The operator's path: a dry run, the backfill with its progress on
// stderr and its summary on stdout, and a run again that finds nothing
// left.
func TestBackfillCommand(t *testing.T) {
	t.Parallel()
	dbURL, count := backfillDB(t, 120)

	r := ok(t, run(t, dbURL, "backfill", "--type", "customer.imported", "--query", customersQuery, "--dry-run", "--batch-size", "50"))
	require.Contains(t, r.stdout, "backfill customer.imported (dry run): finished: 120 rows would be appended, 0 already there; nothing was written")
	require.Zero(t, count(`SELECT count(*) FROM riverbus_event`))

	file := filepath.Join(t.TempDir(), "customers.sql")
	require.NoError(t, os.WriteFile(file, []byte(customersQuery+";\n"), 0o600))
	r = ok(t, run(t, dbURL, "backfill", "--type", "customer.imported", "--name", "customers", "--query-file", file,
		"--batch-size", "50", "--progress-every", "1ns", "--version", "2"))
	require.Contains(t, r.stdout, "backfill customers: finished: 120 events appended, 0 rows already there, in ")
	require.Contains(t, r.stderr, "backfill customers: starting\n")
	// A line per batch (progress every 1ns), counted against the total.
	for _, line := range []string{"50/120 rows (42%)", "100/120 rows (83%)", "120/120 rows (100%)"} {
		require.Regexp(t, regexp.MustCompile(`backfill customers: `+regexp.QuoteMeta(line)+`, \d+ rows/s, ETA \w+`), r.stderr)
	}
	require.Equal(t, 120, count(`SELECT count(*) FROM riverbus_event WHERE tags @> '{backfill=customers}' AND type = 'customer.imported' AND version = 2`))

	r = ok(t, run(t, dbURL, "backfill", "--type", "customer.imported", "--name", "customers", "--query-file", file, "--no-count"))
	require.Contains(t, r.stderr, "backfill customers: resuming after id 120 (120 rows appended by earlier runs)")
	require.Contains(t, r.stdout, "finished: 0 events appended")
	require.Equal(t, 120, count(`SELECT count(*) FROM riverbus_event`))
}

// Bad input exits 2: flags, the query, a row (named by its id and column,
// with text from the row escaped); a fixed row resumes where it stopped.
func TestBackfillCommandBadInput(t *testing.T) {
	t.Parallel()
	dbURL, count := backfillDB(t, 30)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--query", customersQuery}, `required flag(s) "type" not set`},
		{[]string{"--type", "t"}, "at least one of the flags in the group [query query-file] is required"},
		{[]string{"--type", "t", "--query", "x", "--query-file", "y"}, "if any flags in the group [query query-file] are set none of the others can be"},
		{[]string{"--type", "t", "--query", customersQuery, "--batch-size", "0"}, "--batch-size must be between 1 and 100000, got 0"},
		{[]string{"--type", "t", "--query", customersQuery, "--rate", "-1"}, "--rate must not be negative"},
		{[]string{"--type", "t", "--query", customersQuery, "--version", "0"}, "--version must be between 1 and 10000, got 0"},
		{[]string{"--type", "t", "--query-file", filepath.Join(t.TempDir(), "missing.sql")}, "--query-file: open "},
		{[]string{"--type", "", "--query", customersQuery}, "BackfillParams.Type must not be empty"},
		{[]string{"--type", "t", "--query", `SELECT id, '{}'::jsonb AS data FROM customers`}, `query: key is missing`},
		{[]string{"--type", "t", "--query", `UPDATE customers SET name = 'x' RETURNING id, name AS key, '{}'::jsonb AS data`}, `query: syntax error`},
	} {
		r := run(t, dbURL, append([]string{"backfill"}, c.args...)...)
		require.Equal(t, 2, r.code, "%v: stdout %s stderr %s", c.args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, c.want, c.args)
	}

	// A bad row: two rows have the id 17.
	bad := `SELECT CASE WHEN id = 18 THEN 17 ELSE id END AS id, name AS key, '{}'::jsonb AS data FROM customers`
	r := run(t, dbURL, "backfill", "--type", "t", "--name", "bad", "--query", bad, "--batch-size", "10")
	require.Equal(t, 2, r.code, "stdout %s stderr %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, `riverbus: outbox: backfill "bad": row id 17: id is not unique`)
	require.Contains(t, r.stderr, "backfill bad: stopped at a bad row or query after id 10, with 10 rows appended by this run; fix it and run the same command again to resume there")
	require.NotContains(t, r.stderr, "Usage:", "a bad row is not a usage error")
	require.Equal(t, 10, count(`SELECT count(*) FROM riverbus_event`))
	// Text from the rows is escaped on the terminal.
	r = run(t, dbURL, "backfill", "--type", "t", "--name", "esc", "--query", `SELECT E'x\x1b[2J' || id AS id, NULL::text AS key, '{}'::jsonb AS data FROM customers`)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `row id x\x1b[2J1: key must not be NULL`)
	require.NotContains(t, r.stderr, "\x1b")

	r = ok(t, run(t, dbURL, "backfill", "--type", "t", "--name", "bad", "--query", customersQuery))
	require.Contains(t, r.stderr, "resuming after id 10")
	require.Contains(t, r.stdout, "finished: 20 events appended")
}

// Ctrl-C (the command's context ending) stops a backfill between batches
// with exit 3 and says how to resume; the same command then finishes it.
func TestBackfillCommandStopsAndResumes(t *testing.T) {
	t.Parallel()
	dbURL, count := backfillDB(t, 40)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Stop once the second batch is reported.
	stderr := &watchWriter{on: "backfill customers: 20/40 rows", then: cancel}
	var stdout bytes.Buffer
	code := cli.MainContext(ctx, []string{"--database-url", dbURL, "backfill", "--type", "customer.imported", "--name", "customers",
		"--query", customersQuery, "--batch-size", "10", "--progress-every", "1ns"}, &stdout, stderr)
	require.Equal(t, 3, code, "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Contains(t, stderr.String(), "riverbus: backfill customers: stopped after id 20, with 20 rows appended by this run; run the same command again to resume")
	require.Equal(t, 20, count(`SELECT count(*) FROM riverbus_event`))

	r := ok(t, run(t, dbURL, "backfill", "--type", "customer.imported", "--name", "customers", "--query", customersQuery, "--batch-size", "10"))
	require.Contains(t, r.stderr, "resuming after id 20 (20 rows appended by earlier runs)")
	require.Contains(t, r.stdout, "finished: 20 events appended, 0 rows already there")
	require.Equal(t, 40, count(`SELECT count(*) FROM riverbus_event`))
}

// watchWriter collects what is written and calls then once what it holds
// contains on.
type watchWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	on     string
	then   func()
	called bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if !w.called && strings.Contains(w.b.String(), w.on) {
		w.called = true
		w.then()
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A backfill whose connections the server ends (a restart, a failover)
// resumes after the last committed batch and finishes: every row once.
func TestBackfillCommandRidesOutALostConnection(t *testing.T) {
	t.Parallel()
	dbURL, count := backfillDB(t, 40)
	admin, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	terminated := 0
	stderr := &watchWriter{on: "backfill customers: 20/40 rows", then: func() {
		require.NoError(t, admin.QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'backfill-test'`).Scan(&terminated))
	}}
	var stdout bytes.Buffer
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", "backfill-test")
	u.RawQuery = q.Encode()
	code := cli.MainContext(context.Background(), []string{"--database-url", u.String(), "backfill",
		"--type", "customer.imported", "--name", "customers", "--query", customersQuery, "--batch-size", "10", "--progress-every", "1ns"}, &stdout, stderr)
	require.Equal(t, 0, code, "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Positive(t, terminated)
	require.Contains(t, stderr.String(), "lost the database; resuming after the last committed batch")
	require.Contains(t, stdout.String(), "backfill customers: finished: 40 events appended, 0 rows already there")
	require.Equal(t, 40, count(`SELECT count(*) FROM riverbus_event`))
	require.Equal(t, 40, count(`SELECT count(DISTINCT event_id) FROM riverbus_event`))
}
