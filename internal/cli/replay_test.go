package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// `pool reset --to N --wait` of a projection whose handler refuses events
// it has seen (its own unique key; RunExactlyOnce guards one job, and each
// replayed event is a new job): every replayed event becomes a dead letter. The wait says
// so, names them with their errors, and exits 3, not "caught up" and 0.
func TestPoolResetWaitReportsDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	jobtest.CreateEventOnceTable(t, db)
	ok(t, run(t, dbURL, "pool", "create", "ledger", "--max-attempts", "1"))
	ws := workers.NewRegistry()
	require.NoError(t, workers.AddArgsSafely(ws, jobtest.PoolArgs("ledger"), &jobtest.EventOnce{DB: db}, nil))
	client := riverbustest.StartClient(t, db, &riverbus.Config{Workers: ws})
	for range 5 {
		ok(t, run(t, dbURL, "append", "--type", "entry.posted", "--data", `{}`))
	}
	riverbustest.WaitForSequence(t, client, "ledger", 5, 30*time.Second)

	r := runContext(t, 60*time.Second, dbURL, "pool", "reset", "ledger", "--to", "0", "--wait")
	require.Equal(t, 3, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.NotContains(t, r.stdout, "caught up")
	require.Contains(t, r.stdout, "5 of the replayed events became dead letters")
	require.Contains(t, r.stdout, `duplicate key value violates unique constraint "event_once_pkey"`)
	for seq := 1; seq <= 5; seq++ {
		require.Contains(t, r.stdout, fmt.Sprintf("event %d", seq))
	}
	require.Contains(t, r.stderr, "riverbus dlq list --pool ledger")

	// A replay into a projection cleared first is clean: the dead letters
	// of the first replay, of the same events, are not this one's.
	_, err := db.Exec(ctx, `TRUNCATE event_once`)
	require.NoError(t, err)
	r = runContext(t, 60*time.Second, dbURL, "pool", "reset", "ledger", "--to", "2", "--wait")
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "pool ledger caught up: checkpoint 5")
	require.False(t, strings.Contains(r.stdout, "dead letter"), r.stdout)
}

// runContext runs the command line under a context that ends after timeout
// (a wait that never ends fails the test instead of hanging it).
func runContext(t *testing.T, timeout time.Duration, dbURL string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errOut strings.Builder
	code := cli.MainContext(ctx, append([]string{"--database-url", dbURL}, args...), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}
