package cli

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/config"
)

// parseSettings runs riverbus with args up to the command's RunE, which it
// replaces, and returns the configuration the command would run with.
func parseSettings(t *testing.T, args ...string) (*config.Config, error) {
	t.Helper()
	a := &app{stdout: io.Discard, stderr: io.Discard}
	root := a.rootCommand()
	cmd, _, err := root.Find(args)
	require.NoError(t, err)
	var got *config.Config
	cmd.RunE = func(*cobra.Command, []string) error { got = a.cfg; return nil }
	root.SetArgs(args)
	root.SetOut(io.Discard)
	if err := root.Execute(); err != nil {
		return nil, err
	}
	require.NotNil(t, got)
	return got, nil
}

// A flag given overrides its variable; an unset flag keeps the
// environment's value; a flag can stand in for a variable Validate would
// refuse.
func TestFlagsOverrideTheEnvironment(t *testing.T) {
	t.Setenv("RIVERBUS_GAP_TIMEOUT", "7s")
	t.Setenv("RIVERBUS_BATCH_SIZE", "10")
	t.Setenv("RIVERBUS_POLL_INTERVAL", "3s")
	t.Setenv("RIVERBUS_UI_ADDR", "127.0.0.1:8181")
	c, err := parseSettings(t, "run", "--gap-timeout", "250ms", "--log-level", "debug", "--fanout-workers=9",
		"--ui-allowed-hosts", "a.example, b.example", "--ui-allowed-hosts", "c.example")
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, c.GapTimeout)
	require.Equal(t, 9, c.FanoutWorkers)
	require.Equal(t, "debug", c.LogLevel)
	require.Equal(t, []string{"a.example", "b.example", "c.example"}, c.UIAllowedHosts)
	require.Equal(t, 10, c.BatchSize, "an unset flag keeps the environment's value")
	require.Equal(t, 3*time.Second, c.PollInterval)
	require.Equal(t, "127.0.0.1:8181", c.UIAddr)

	t.Setenv("RIVERBUS_BATCH_SIZE", "0")
	_, err = parseSettings(t, "fanout")
	require.ErrorContains(t, err, "RIVERBUS_BATCH_SIZE (--batch-size) must be between 1 and 100000, got 0")
	c, err = parseSettings(t, "fanout", "--batch-size", "20")
	require.NoError(t, err)
	require.Equal(t, 20, c.BatchSize)
}

// --database-url overrides DATABASE_URL.
func TestDatabaseURLFlag(t *testing.T) {
	t.Setenv("RIVERBUS_DATABASE_URL", "")
	os.Unsetenv("RIVERBUS_DATABASE_URL")
	t.Setenv("DATABASE_URL", "postgres://env/db")
	c, err := parseSettings(t, "pool", "list")
	require.NoError(t, err)
	require.Equal(t, "postgres://env/db", c.DatabaseURL)
	c, err = parseSettings(t, "pool", "list", "--database-url", "postgres://flag/db")
	require.NoError(t, err)
	require.Equal(t, "postgres://flag/db", c.DatabaseURL)
	c, err = parseSettings(t, "--database-url", "postgres://flag/db", "status")
	require.NoError(t, err, "before the command, as the tests and scripts give it")
	require.Equal(t, "postgres://flag/db", c.DatabaseURL)
}

// The configuration table of docs/configuration.md is rendered from
// internal/config's struct and the command tree; this keeps the three in
// step. To update the page, paste the table the failure prints.
func TestConfigurationDocTable(t *testing.T) {
	page, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	a := &app{stdout: io.Discard, stderr: io.Discard}
	table := configTable(a.rootCommand())
	require.NotContains(t, table, "(none)", "every setting has a flag on some command")
	require.True(t, strings.Contains(string(page), table),
		"docs/configuration.md's configuration table is out of date; replace it with:\n\n%s", table)
}

// The fetch poll interval reaches the River settings of the commands that
// work jobs, from the environment or the flag.
func TestFetchPollIntervalReachesTheWorkers(t *testing.T) {
	t.Setenv("RIVERBUS_FETCH_POLL_INTERVAL", "2s")
	c, err := parseSettings(t, "work", "--pool", "billing", "--webhook", "http://127.0.0.1:1/hook")
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, (&app{cfg: c}).workConfig().FetchPollInterval)
	c, err = parseSettings(t, "run", "--fetch-poll-interval", "1s")
	require.NoError(t, err)
	require.Equal(t, time.Second, (&app{cfg: c}).workConfig().FetchPollInterval)
}

// RIVERBUS_MARK_INTERVAL and --mark-interval reach the fan-out of the
// commands that run one, and a value under the least is refused by name.
func TestMarkIntervalReachesTheFanout(t *testing.T) {
	t.Setenv("RIVERBUS_MARK_INTERVAL", "2s")
	c, err := parseSettings(t, "fanout")
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, (&app{cfg: c}).fanoutConfig().MarkInterval)
	c, err = parseSettings(t, "run", "--mark-interval", "250ms")
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, (&app{cfg: c}).fanoutConfig().MarkInterval)
	_, err = parseSettings(t, "run", "--mark-interval", "10ms")
	require.ErrorContains(t, err, "RIVERBUS_MARK_INTERVAL (--mark-interval) must be at least 100ms, got 10ms")
}
