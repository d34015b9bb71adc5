package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// beRiverbus set to 1 makes this test binary the riverbus command (its
// arguments go to cli.Main), so that a test can run, in a shell, a command
// that riverbus printed naming this binary.
const beRiverbus = "RIVERBUS_CLI_TEST_BE_RIVERBUS"

func TestMain(m *testing.M) {
	if os.Getenv(beRiverbus) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	pgtest.Main(m)
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, dbURL string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	if dbURL != "" {
		args = append([]string{"--database-url", dbURL}, args...)
	}
	code := cli.Main(args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func ok(t *testing.T, r result) result {
	t.Helper()
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	return r
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	r := ok(t, run(t, dbURL, "migrate"))
	require.Contains(t, r.stdout, "applied River migrations")
	r = ok(t, run(t, dbURL, "migrate"))
	require.Contains(t, r.stdout, "schema is up to date")
}

func TestUnreachableDatabaseNamesTheHost(t *testing.T) {
	t.Parallel()
	r := run(t, "postgres://nobody@127.0.0.1:1/nowhere?connect_timeout=2", "pool", "list")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "cannot reach the database at 127.0.0.1:1/nowhere")
}

func TestBadUsage(t *testing.T) {
	t.Parallel()
	r := run(t, "", "pool", "create")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "expects a pool name, got 0 argument(s)")
	require.Contains(t, r.stderr, "Usage:")

	r = run(t, "", "pool", "list", "--no-such-flag")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "unknown flag: --no-such-flag")

	r = run(t, "postgres://x@127.0.0.1:1/x", "pool", "create", "p", "--from", "yesterday")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--from: invalid pool: start position must be beginning, now or a sequence number")

	r = run(t, "postgres://x@127.0.0.1:1/x", "dlq", "retry")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "give either one JOB_ID or --pool POOL --all")
}

// The benchmark is a command of its own, riverbus-bench: the operator's
// binary neither lists nor runs it.
func TestNoBenchCommand(t *testing.T) {
	t.Parallel()
	r := ok(t, run(t, "", "--help"))
	require.Contains(t, r.stdout, "Available Commands:")
	require.NotContains(t, r.stdout, "bench")
	r = run(t, "", "bench", "--scale", "0.1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `unknown command "bench"`)
}

func TestPoolLifecycle(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)

	r := ok(t, run(t, dbURL, "pool", "create", "billing", "--types", "invoice.created,invoice.paid", "--max-attempts", "7"))
	require.Contains(t, r.stdout, "created pool billing (queue billing, starts after sequence 0)")
	r = ok(t, run(t, dbURL, "pool", "create", "billing", "--types", "invoice.paid,invoice.created", "--max-attempts", "7"))
	require.Contains(t, r.stdout, "exists with these settings")

	r = run(t, dbURL, "pool", "create", "billing", "--max-attempts", "3")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "pool exists with other settings")

	r = ok(t, run(t, dbURL, "pool", "update", "billing", "--max-attempts", "3"))
	require.Contains(t, r.stdout, "max_attempts=3")
	require.Contains(t, r.stdout, "types=invoice.created,invoice.paid", "update keeps unset settings")

	r = run(t, dbURL, "pool", "create", "bad name")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `name "bad name" must be 2-100 letters`)

	r = run(t, dbURL, "pool", "show", "nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown pool "nope": pools are billing`)

	r = ok(t, run(t, dbURL, "pool", "list", "--json"))
	var pools []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &pools))
	require.Len(t, pools, 1)
	require.Equal(t, "billing", pools[0]["name"])
	require.Equal(t, float64(3), pools[0]["max_attempts"])

	r = ok(t, run(t, dbURL, "pool", "pause", "billing"))
	require.Contains(t, r.stdout, "pool billing is paused")
	r = ok(t, run(t, dbURL, "pool", "list"))
	require.Contains(t, r.stdout, "paused")
	ok(t, run(t, dbURL, "pool", "resume", "billing"))

	ok(t, run(t, dbURL, "append", "--type", "invoice.created", "--key", "c1", "--tag", "region=eu", "--data", `{"invoice":"INV-1"}`))
	r = ok(t, run(t, dbURL, "pool", "reset", "billing", "--to", "0"))
	require.Contains(t, r.stdout, "events after 0 will be fanned out again")
	r = run(t, dbURL, "pool", "reset", "billing", "--to", "-4")
	require.Equal(t, 2, r.code)

	r = ok(t, run(t, dbURL, "pool", "delete", "billing"))
	require.Contains(t, r.stdout, "deleted pool billing")
	r = ok(t, run(t, dbURL, "pool", "list"))
	require.Contains(t, r.stdout, "no pools yet")
}

func TestAppendAndStatus(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	r := ok(t, run(t, dbURL, "append", "--type", "order.placed", "--data", `{"order":1}`))
	require.Contains(t, r.stdout, "at sequence 1")

	r = run(t, dbURL, "append", "--type", "order.placed", "--data", `{"order":`)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "Data must be valid JSON")
	r = run(t, dbURL, "append", "--type", "order.placed", "--tag", "novalue", "--data", `{}`)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "Tags[0] must be name=value")
	r = run(t, dbURL, "append", "--data", `{}`)
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `required flag(s) "type" not set`)

	ok(t, run(t, dbURL, "pool", "create", "orders"))
	r = ok(t, run(t, dbURL, "status", "--json"))
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, float64(1), st["last_sequence"])
	r = ok(t, run(t, dbURL, "status"))
	require.True(t, strings.Contains(r.stdout, "POOL") && strings.Contains(r.stdout, "orders"), r.stdout)

	r = ok(t, run(t, dbURL, "dlq", "list"))
	require.Contains(t, r.stdout, "no dead letters")
	r = run(t, dbURL, "dlq", "list", "--pool", "nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown pool "nope": pools are orders`)
	r = run(t, dbURL, "dlq", "retry", "12345")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "12345")
}

func TestNoDatabaseConfigured(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("RIVERBUS_DATABASE_URL", "")
	r := run(t, "", "pool", "list")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no database: set DATABASE_URL")
}

func TestPoolOrderingFlags(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	r := ok(t, run(t, dbURL, "pool", "create", "accounts", "--ordering", "key", "--on-dead-letter", "block"))
	require.Contains(t, r.stdout, "created pool accounts")
	ok(t, run(t, dbURL, "pool", "create", "ledger", "--group", "transaction", "--ordering", "global"))
	r = ok(t, run(t, dbURL, "pool", "list"))
	require.Contains(t, r.stdout, "key/block")
	require.Contains(t, r.stdout, "global/release")
	require.Contains(t, r.stdout, "transaction")
	r = ok(t, run(t, dbURL, "pool", "update", "accounts", "--on-dead-letter", "release"))
	require.Contains(t, r.stdout, "ordering=key on_dead_letter=release")

	r = run(t, dbURL, "pool", "create", "bad", "--ordering", "sideways")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `ordering must be none, key or global, got "sideways"`)
	r = run(t, dbURL, "pool", "create", "bad", "--group", "batch")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `grouping must be none or transaction, got "batch"`)
}

func TestDLQShowAndPurgeBadInput(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "pool", "create", "pp"))
	r := run(t, dbURL, "dlq", "show", "77")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "no dead letter with job id 77")
	r = run(t, dbURL, "dlq", "show", "x")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `job id must be a number, got "x"`)
	r = ok(t, run(t, dbURL, "dlq", "purge", "--pool", "pp", "--all"))
	require.Contains(t, r.stdout, "purged 0 dead letter(s) of pool p")
	r = run(t, dbURL, "dlq", "purge", "--pool", "nope", "--all")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `unknown pool "nope": pools are p`)
	r = run(t, dbURL, "dlq", "purge", "5", "--all")
	require.Equal(t, 2, r.code)
}

func TestSettingFlags(t *testing.T) {
	t.Parallel()
	r := run(t, "", "fanout", "--gap-timeout", "-1s")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "RIVERBUS_GAP_TIMEOUT (--gap-timeout) must be positive, got -1s")
	r = run(t, "", "fanout", "--batch-size", "lots")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `invalid argument "lots" for "--batch-size" flag: want a whole number`)
	r = run(t, "", "fanout", "--help")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stdout, "--gap-timeout duration")
	require.Contains(t, r.stdout, "env RIVERBUS_GAP_TIMEOUT")
}

// work binds the webhook to its pool through the client, which refuses a
// River queue that also holds a pool work does not deliver: it would fetch
// that pool's jobs and fail them as unknown kinds.
func TestWorkRefusesAQueueSharedWithAnotherPool(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "pool", "create", "billing", "--queue", "shared"))
	ok(t, run(t, dbURL, "pool", "create", "audit", "--queue", "shared"))
	r := run(t, dbURL, "work", "--pool", "billing", "--webhook", "http://127.0.0.1:1/hook")
	require.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, `River queue "shared" also holds pool(s) "audit", which have no worker here`)
	require.NotContains(t, r.stdout, "delivering pool")
}
