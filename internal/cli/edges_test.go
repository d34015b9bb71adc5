package cli_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
)

// `pool create NAME --update` changes only the settings it is given; the
// others keep the pool's values (they used to go back to the defaults).
func TestPoolCreateUpdateKeepsUnsetSettings(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "pool", "create", "accounts", "--ordering", "key", "--on-dead-letter", "block",
		"--tags", "region=eu", "--max-attempts", "7", "--priority", "2", "--queue", "acct"))

	r := ok(t, run(t, dbURL, "pool", "create", "accounts", "--update", "--types", "account.opened"))
	require.Contains(t, r.stdout, "pool accounts: queue=acct types=account.opened tags=region=eu max_attempts=7 priority=2 ordering=key on_dead_letter=block group=none")

	r = ok(t, run(t, dbURL, "pool", "create", "accounts", "--update", "--types", "", "--max-attempts", "3"))
	require.Contains(t, r.stdout, "types=(all) tags=region=eu max_attempts=3 priority=2 ordering=key on_dead_letter=block")

	// A pool that does not exist yet is created with the defaults.
	r = ok(t, run(t, dbURL, "pool", "create", "fresh", "--update", "--types", "a.b"))
	require.Contains(t, r.stdout, "created pool fresh")
}

// Bad input exits 2 with the reason and the usage, whichever layer rejects
// it; a failure exits 1.
func TestBadInputExitsTwo(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	for _, tc := range []struct {
		args   []string
		reason string
	}{
		{[]string{"pool", "create", "bad name"}, `name "bad name" must be 2-100 letters`},
		{[]string{"pool", "create", "pp", "--priority", "9"}, "priority must be between 1 and 4, got 9"},
		{[]string{"pool", "create", "pp", "--max-attempts", "-2"}, "max attempts must be between 1 and 1000, got -2"},
		{[]string{"pool", "create", "pp", "--ordering", "sideways"}, `ordering must be none, key or global, got "sideways"`},
		{[]string{"pool", "create", "pp", "--group", "batch"}, `grouping must be none or transaction, got "batch"`},
		{[]string{"pool", "create", "pp", "--queue", "Not A Queue"}, `queue "Not A Queue" must be lower-case`},
		{[]string{"pool", "update", "pp", "--on-dead-letter", "explode"}, `on dead letter must be release or block, got "explode"`},
		{[]string{"append", "--type", "order.placed", "--data", `{"order":`}, "Data must be valid JSON"},
		{[]string{"append", "--type", "order.placed", "--tag", "novalue", "--data", `{}`}, "Tags[0] must be name=value"},
		{[]string{"fanout", "--batch-size", "lots"}, `invalid argument "lots" for "--batch-size" flag: want a whole number`},
		{[]string{"run", "--gap-timeout", "soon"}, `invalid argument "soon" for "--gap-timeout" flag: want a duration such as 5s or 250ms`},
		{[]string{"fanout", "--gap-timeout", "-1s"}, "RIVERBUS_GAP_TIMEOUT (--gap-timeout) must be positive, got -1s"},
		{[]string{"ui", "--ui-addr", "nonsense"}, "RIVERBUS_UI_ADDR (--ui-addr) must be host:port"},
		{[]string{"pool", "list", "--gap-timeout", "1s"}, "unknown flag: --gap-timeout"},
		{[]string{"status", "--watch", "soon"}, `invalid argument "soon" for "--watch" flag: want a duration such as 5s or 250ms`},
		{[]string{"pool", "create", "pp", "--priority", "high"}, `invalid argument "high" for "--priority" flag: want a whole number`},
		{[]string{"run", "--demo-rate", "-1"}, "--demo-rate must be between 0 and 10000, got -1"},
	} {
		if tc.args[0] == "pool" && tc.args[1] == "update" {
			ok(t, run(t, dbURL, "pool", "create", "pp"))
		}
		r := run(t, dbURL, tc.args...)
		require.Equal(t, 2, r.code, "%v\nstdout: %s\nstderr: %s", tc.args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, tc.reason, "%v", tc.args)
		require.Contains(t, r.stderr, "Usage:", "%v", tc.args)
	}

	r := run(t, dbURL, "pool", "show", "nope")
	require.Equal(t, 1, r.code, "an unknown pool is a failure, not bad input")
	require.NotContains(t, r.stderr, "Usage:")
}

// A database URL that does not parse is a setting that does not parse:
// bad input, exit 2 with the reason and the usage, from the flag or the
// environment, for the commands that connect once and for those that
// ride out an outage alike; its password is masked.
func TestUnparsableDatabaseURLExitsTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url    string
		reason string
	}{
		{"postgres://app:s3cret@db.example:notaport/app", "invalid database URL: cannot parse `postgres://app:xxxxx@db.example:notaport/app`: invalid port"},
		{"postgres://%zz", "invalid database URL"},
		{"not a url ::", "invalid database URL"},
	} {
		for _, args := range [][]string{{"pool", "list"}, {"migrate"}, {"fanout"}, {"run", "--ui-addr", "127.0.0.1:0", "--metrics-addr", ""}} {
			r := runContext(t, 30*time.Second, tc.url, args...)
			require.Equal(t, 2, r.code, "%s %v\nstdout: %s\nstderr: %s", tc.url, args, r.stdout, r.stderr)
			require.Contains(t, r.stderr, tc.reason, "%s %v", tc.url, args)
			require.Contains(t, r.stderr, "Usage:", "%s %v", tc.url, args)
			require.NotContains(t, r.stderr, "s3cret")
		}
	}
}

// The same from the environment, DATABASE_URL or RIVERBUS_DATABASE_URL.
func TestUnparsableDatabaseURLFromTheEnvironmentExitsTwo(t *testing.T) {
	t.Setenv("RIVERBUS_DATABASE_URL", "")
	require.NoError(t, os.Unsetenv("RIVERBUS_DATABASE_URL")) // set, even empty, it wins
	t.Setenv("DATABASE_URL", "postgres://app@db.example:notaport/app")
	r := run(t, "", "status")
	require.Equal(t, 2, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "invalid database URL: cannot parse `postgres://app@db.example:notaport/app`")

	t.Setenv("RIVERBUS_DATABASE_URL", "postgres://%zz")
	r = run(t, "", "status")
	require.Equal(t, 2, r.code, "stderr: %s", r.stderr)
	require.Contains(t, r.stderr, "invalid database URL: cannot parse `postgres://%zz`")
}

// Against a database that was never migrated, every command that needs
// the schema says to run `riverbus migrate`, in one line.
func TestUnmigratedDatabaseSaysMigrate(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)
	for _, args := range [][]string{
		{"pool", "list"},
		{"pool", "create", "billing"},
		{"pool", "show", "billing"},
		{"pool", "pause", "billing"},
		{"pool", "reset", "billing", "--to", "0"},
		{"pool", "delete", "billing"},
		{"status"},
		{"append", "--type", "t.x", "--data", "{}"},
		{"dlq", "list"},
		{"dlq", "show", "1"},
		{"tail"},
		{"fanout"},
		{"work", "--pool", "billing", "--webhook", "http://127.0.0.1:1/hook"},
		{"repair", "horizon"},
		{"ui", "--ui-addr", "127.0.0.1:0", "--metrics-addr", ""},
	} {
		r := run(t, dbURL, args...)
		require.Equal(t, 1, r.code, "%v\nstdout: %s\nstderr: %s", args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, "has no riverbus schema: run `riverbus migrate` first", "%v", args)
		require.NotContains(t, r.stderr, "does not exist", "%v", args)
		require.Equal(t, 1, len(splitLines(r.stderr)), "%v: one line: %s", args, r.stderr)
	}
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// `status --watch 10s` takes 10s as the interval (it used to be taken as
// an argument and refused), and `--watch` alone still means the default.
// Each run must print a status and keep watching until cancelled.
func TestStatusWatchTakesASeparateValue(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	for _, args := range [][]string{
		{"status", "--watch", "10s"},
		{"status", "--watch", "10s", "--json"},
		{"status", "--watch"},
		{"status", "--watch", "--json"},
		{"status", "--json", "--watch"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		var errOut strings.Builder
		done := make(chan int, 1)
		go func() {
			code := cli.MainContext(ctx, append([]string{"--database-url", dbURL}, args...), pw, &errOut)
			pw.Close()
			done <- code
		}()
		// The first status arrives without waiting for the interval; an
		// exit before it (the old "expects no arguments") ends the pipe.
		lines := bufio.NewScanner(pr)
		printed := false
		for !printed && lines.Scan() {
			printed = strings.Contains(lines.Text(), "horizon")
		}
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		select {
		case code := <-done:
			cancel()
			t.Fatalf("%v exited with %d instead of watching: %s", args, code, errOut.String())
		case <-time.After(time.Second):
			// Still watching a second after its first status (the
			// intervals are 2 s and 10 s).
		}
		require.True(t, printed, "%v printed no status", args)
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, "%v: %s", args, errOut.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("%v did not stop when cancelled", args)
		}
	}
}
