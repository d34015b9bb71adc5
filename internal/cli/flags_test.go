package cli_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// helpFlags returns the names of the flags a command's --help lists.
func helpFlags(t *testing.T, args ...string) []string {
	t.Helper()
	r := ok(t, run(t, "", append(args, "--help")...))
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^[ \t]+(?:-\w, )?--([a-z][a-z-]*)`).FindAllStringSubmatch(r.stdout, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// Each command shows the flags of the settings it uses and no other: the
// fan-out's on fanout and run, River UI's and the metrics' on ui and run,
// --database-url on every command that connects, the log settings on all.
func TestHelpShowsOnlyTheCommandsFlags(t *testing.T) {
	t.Parallel()
	var (
		common  = []string{"help", "log-format", "log-level"}
		db      = append([]string{"database-url"}, common...)
		fanout  = []string{"batch-bytes", "batch-size", "fanout-workers", "gap-check-interval", "gap-timeout", "mark-interval", "poll-interval"}
		serving = []string{"metrics-addr", "metrics-password", "metrics-user", "ui-addr", "ui-allowed-hosts", "ui-password", "ui-user"}
		jobs    = []string{"cancelled-job-retention", "completed-job-retention", "discarded-job-retention"}
	)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, common},
		{[]string{"dev"}, common},
		{[]string{"migrate"}, db},
		{[]string{"pool", "list"}, append([]string{"json"}, db...)},
		{[]string{"pool", "reset"}, append([]string{"to", "to-time", "wait"}, db...)},
		{[]string{"status"}, append([]string{"json", "watch"}, db...)},
		{[]string{"dlq", "retry"}, append([]string{"all", "pool"}, db...)},
		{[]string{"work"}, append(append([]string{"concurrency", "fetch-poll-interval", "metrics-password", "metrics-user", "pool", "process-metrics-addr", "secret-env", "timeout", "webhook", "webhook-env"}, jobs...), db...)},
		{[]string{"fanout"}, append(append([]string{"metrics-password", "metrics-user", "process-metrics-addr", "retention-interval"}, fanout...), db...)},
		{[]string{"ui"}, append(slices.Clone(serving), db...)},
		{[]string{"run"}, append(append(append([]string{"demo", "demo-rate", "fetch-poll-interval", "retention-interval"}, fanout...), jobs...), append(slices.Clone(serving), db...)...)},
		{[]string{"retention"}, append(append([]string{"apply", "batch-size", "json", "keep", "max-batches"}, jobs...), db...)},
		{[]string{"retention", "set"}, append([]string{"keep", "off", "until-consumed"}, db...)},
	} {
		want := slices.Clone(tc.want)
		slices.Sort(want)
		require.Equal(t, want, helpFlags(t, tc.args...), "riverbus %s --help", strings.Join(tc.args, " "))
	}
}

// A setting's flag defaults to the environment's value, so --help shows
// what the command would run with; a password or a database URL from the
// environment is never printed.
func TestSettingFlagsDefaultToTheEnvironment(t *testing.T) {
	t.Setenv("RIVERBUS_GAP_TIMEOUT", "7s")
	t.Setenv("RIVERBUS_BATCH_SIZE", "250")
	t.Setenv("RIVERBUS_UI_USER", "ops")
	t.Setenv("RIVERBUS_UI_PASSWORD", "hunter2")
	t.Setenv("RIVERBUS_METRICS_USER", "scraper")
	t.Setenv("RIVERBUS_METRICS_PASSWORD", "sesame")
	t.Setenv("RIVERBUS_UI_ALLOWED_HOSTS", "a.example, b.example")
	t.Setenv("DATABASE_URL", "postgres://app:swordfish@db.internal/app")
	r := ok(t, run(t, "", "run", "--help"))
	line := func(flag string) string {
		m := regexp.MustCompile(`(?m)^[ \t]+--` + flag + ` .*$`).FindString(r.stdout)
		require.NotEmpty(t, m, "no --%s in:\n%s", flag, r.stdout)
		return m
	}
	require.Contains(t, line("gap-timeout"), "(default 7s)")
	require.Contains(t, line("batch-size"), "(default 250)")
	require.Contains(t, line("ui-user"), `(default "ops")`)
	require.Contains(t, line("ui-allowed-hosts"), "(default [a.example,b.example])")
	require.NotContains(t, line("ui-password"), "default")
	require.NotContains(t, line("metrics-password"), "default")
	for _, secret := range []string{"hunter2", "sesame", "swordfish"} {
		require.NotContains(t, r.stdout, secret)
	}
}

// A variable that does not parse fails every command with exit 2 and its
// name, even when the flag is given; --help still works.
func TestBadVariableExitsTwo(t *testing.T) {
	t.Setenv("RIVERBUS_GAP_TIMEOUT", "soon")
	for _, args := range [][]string{{"pool", "list"}, {"fanout", "--gap-timeout", "1s"}} {
		r := run(t, "", args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, `invalid RIVERBUS_GAP_TIMEOUT="soon": want a duration such as 5s or 250ms`, "%v", args)
	}
	ok(t, run(t, "", "fanout", "--help"))
}
