package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// Behind PgBouncer in transaction mode, append and the operator commands
// work with the URL docs/deployment.md gives; every long-running command and migrate exits
// at once with an error naming the pooler and the fix, instead of running
// with its wake-ups, pauses and locks lost.
func TestCommandsBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDatabase(t)
	pooled := pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeTransaction), direct, "default_query_exec_mode=exec")

	r := ok(t, run(t, pooled, "append", "--type", "invoice.created", "--data", `{"n":1}`))
	require.Contains(t, r.stdout, "at sequence 1")
	ok(t, run(t, pooled, "pool", "create", "billing"))
	ok(t, run(t, pooled, "pool", "pause", "billing"))

	for _, args := range [][]string{
		{"fanout"},
		{"work", "--pool", "billing", "--webhook", "http://127.0.0.1:1/hook"},
		{"run", "--ui-addr", "127.0.0.1:0", "--metrics-addr", ""},
		{"ui", "--ui-addr", "127.0.0.1:0", "--metrics-addr", ""},
		{"tail"},
		{"migrate"},
	} {
		// Bounded: a command that ran instead of refusing is ended here
		// and fails the test.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var out, errOut strings.Builder
		code := cli.MainContext(ctx, append([]string{"--database-url", pooled}, args...), &out, &errOut)
		timedOut := ctx.Err() != nil
		cancel()
		require.False(t, timedOut, "%v ran through the pooler: %s", args, errOut.String())
		require.Equal(t, 1, code, "%v: stdout %s, stderr %s", args, out.String(), errOut.String())
		require.Contains(t, errOut.String(), "riverbus: riverbus "+args[0]+": the database URL leads through a connection pooler in transaction mode (such as PgBouncer", args)
		require.Contains(t, errOut.String(), "directly or through a pooler in session mode", args)
	}
}

// pgx's default exec mode through the pooler fails on another client's
// cached statement: the command's error says what to add to the URL.
func TestAppendBehindATransactionPoolerNamesTheExecMode(t *testing.T) {
	t.Parallel()
	direct := pgtest.NewDatabase(t)
	pooled := pgtest.Through(t, pgtest.PgBouncer(t, pgserver.PoolModeTransaction), direct)
	var r result
	for i := 0; i < 10 && r.code == 0; i++ {
		r = run(t, pooled, "append", "--type", "invoice.created", "--data", `{"n":1}`)
	}
	require.Equal(t, 1, r.code, "pgx's statement cache did not fail through the pooler")
	require.Contains(t, r.stderr, "add default_query_exec_mode=exec to the database URL")
}
