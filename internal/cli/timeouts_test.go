package cli_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
)

// TestCommandsUnderDBATimeouts: with a DBA's limits of one millisecond on
// every statement, lock wait and idle transaction of the database, migrate,
// the operator's commands and the fan-out all work: every pool the
// commands open sets riverbus's own limits.
func TestCommandsUnderDBATimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyDatabase(t)
	admin := pgtest.Connect(t, dbURL)
	pgtest.SetDatabaseDefaults(t, admin, map[string]string{
		"statement_timeout": "1ms", "lock_timeout": "1ms", "idle_in_transaction_session_timeout": "1ms",
	})

	ok(t, run(t, dbURL, "migrate"))
	ok(t, run(t, dbURL, "pool", "create", "billing", "--ordering", "key"))
	for range 3 {
		ok(t, run(t, dbURL, "append", "--type", "invoice.created", "--key", "customer-7", "--data", `{"cents":1200}`))
	}
	ok(t, run(t, dbURL, "status"))
	ok(t, run(t, dbURL, "pool", "list"))

	fanoutCtx, cancel := context.WithCancel(ctx)
	var errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.MainContext(fanoutCtx, []string{"--database-url", dbURL, "fanout", "--poll-interval", "50ms"}, io.Discard, &errOut)
	}()
	defer func() {
		cancel()
		require.Equal(t, 0, <-done, "stderr: %s", errOut.String())
	}()

	// The test reads on sessions of its own made the riverbus way: its
	// statements would be cut as well.
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	riverbus.ConfigurePool(cfg)
	reader, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer reader.Close()
	var cursor, jobs int64
	testwait.Eventually(t, 60*time.Second, func() bool {
		err := reader.QueryRow(ctx, `SELECT cursor_seq, (SELECT count(*) FROM river_job WHERE kind = 'billing') FROM riverbus_pool WHERE name = 'billing'`).Scan(&cursor, &jobs)
		return err == nil && cursor == 3 && jobs == 3
	}, "the fan-out turns the 3 events into 3 jobs: cursor %d, jobs %d; stderr: %s", &cursor, &jobs, &errOut)
	require.NotContains(t, errOut.String(), "SQLSTATE", "no statement failed")
}
