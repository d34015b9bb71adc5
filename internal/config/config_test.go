package config_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/config"
	"github.com/riverbus/riverbus/workers"
)

func TestLoadDefaults(t *testing.T) {
	for _, k := range []string{"DATABASE_URL", "RIVERBUS_DATABASE_URL", "RIVERBUS_GAP_TIMEOUT", "RIVERBUS_BATCH_SIZE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	c, err := config.Load()
	require.NoError(t, err)
	require.Equal(t, "5s", c.GapTimeout.String())
	require.Equal(t, 1000, c.BatchSize)
	require.Equal(t, "127.0.0.1:8080", c.UIAddr)
}

func TestLoadDatabaseURL(t *testing.T) {
	t.Setenv("RIVERBUS_DATABASE_URL", "")
	os.Unsetenv("RIVERBUS_DATABASE_URL")
	t.Setenv("DATABASE_URL", "postgres://plain/db")
	c, err := config.Load()
	require.NoError(t, err)
	require.Equal(t, "postgres://plain/db", c.DatabaseURL)

	t.Setenv("RIVERBUS_DATABASE_URL", "postgres://prefixed/db")
	c, err = config.Load()
	require.NoError(t, err)
	require.Equal(t, "postgres://prefixed/db", c.DatabaseURL)
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	tests := []struct{ key, value, want string }{
		{"RIVERBUS_GAP_TIMEOUT", "-3s", "RIVERBUS_GAP_TIMEOUT (--gap-timeout) must be positive, got -3s"},
		{"RIVERBUS_GAP_TIMEOUT", "soon", `invalid RIVERBUS_GAP_TIMEOUT="soon"`},
		{"RIVERBUS_BATCH_SIZE", "0", "RIVERBUS_BATCH_SIZE (--batch-size) must be between 1 and 100000, got 0"},
		{"RIVERBUS_BATCH_SIZE", "many", `invalid RIVERBUS_BATCH_SIZE="many"`},
		{"RIVERBUS_LOG_LEVEL", "loud", "RIVERBUS_LOG_LEVEL"},
		{"RIVERBUS_LOG_FORMAT", "xml", "RIVERBUS_LOG_FORMAT (--log-format) must be text or json"},
		{"RIVERBUS_UI_USER", "admin", "RIVERBUS_UI_USER (--ui-user) and RIVERBUS_UI_PASSWORD (--ui-password) must be set together"},
		{"RIVERBUS_UI_ADDR", "nonsense", "RIVERBUS_UI_ADDR (--ui-addr) must be host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Setenv(tt.key, tt.value)
			_, err := config.Load()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// Read takes what parses without validating it: the command line's flags
// may still override a value Validate would refuse.
func TestReadDoesNotValidate(t *testing.T) {
	t.Setenv("RIVERBUS_GAP_TIMEOUT", "7s")
	t.Setenv("RIVERBUS_BATCH_SIZE", "0")
	c, err := config.Read()
	require.NoError(t, err)
	require.Equal(t, "7s", c.GapTimeout.String())
	require.Equal(t, 0, c.BatchSize)
	require.ErrorContains(t, c.Validate(), "RIVERBUS_BATCH_SIZE (--batch-size) must be between 1 and 100000, got 0")
	_, err = config.Load()
	require.ErrorContains(t, err, "RIVERBUS_BATCH_SIZE (--batch-size) must be between 1 and 100000, got 0")

	t.Setenv("RIVERBUS_BATCH_SIZE", "many")
	_, err = config.Read()
	require.ErrorContains(t, err, `invalid RIVERBUS_BATCH_SIZE="many"`)
}

func TestSettingOf(t *testing.T) {
	s, ok := config.SettingOf("GAP_TIMEOUT")
	require.True(t, ok)
	require.Equal(t, config.Setting{Env: "GAP_TIMEOUT", Flag: "gap-timeout", Default: "5s", Desc: s.Desc}, s)
	require.NotEmpty(t, s.Desc)
	_, ok = config.SettingOf("NO_SUCH")
	require.False(t, ok)
}

// Only RIVERBUS_-prefixed variables configure riverbus: an unrelated
// LOG_LEVEL or UI_PASSWORD in the process environment (a container, a shell
// profile) is not riverbus's business and must neither break it nor
// configure it.
func TestLoadIgnoresUnprefixedVariables(t *testing.T) {
	for _, s := range config.Settings() {
		t.Setenv(config.Prefix+"_"+s.Env, "")
		os.Unsetenv(config.Prefix + "_" + s.Env)
	}
	t.Setenv("BATCH_SIZE", "7")
	t.Setenv("LOG_LEVEL", "trace")
	t.Setenv("UI_PASSWORD", "stray")
	t.Setenv("GAP_TIMEOUT", "soon")
	t.Setenv("UI_ADDR", "0.0.0.0:80")

	c, err := config.Load()
	require.NoError(t, err, "unprefixed variables must not be read")
	require.Equal(t, 1000, c.BatchSize)
	require.Equal(t, "info", c.LogLevel)
	require.Empty(t, c.UIPassword)
	require.Equal(t, "5s", c.GapTimeout.String())
	require.Equal(t, "127.0.0.1:8080", c.UIAddr)

	// The prefixed variables still configure it, next to the unprefixed ones.
	t.Setenv("RIVERBUS_BATCH_SIZE", "9")
	t.Setenv("RIVERBUS_LOG_LEVEL", "debug")
	t.Setenv("RIVERBUS_UI_USER", "admin")
	t.Setenv("RIVERBUS_UI_PASSWORD", "secret")
	c, err = config.Load()
	require.NoError(t, err)
	require.Equal(t, 9, c.BatchSize)
	require.Equal(t, "debug", c.LogLevel)
	require.Equal(t, "secret", c.UIPassword)

	// A bad prefixed value is reported under its own name.
	t.Setenv("RIVERBUS_BATCH_SIZE", "many")
	_, err = config.Load()
	require.ErrorContains(t, err, `invalid RIVERBUS_BATCH_SIZE="many"`)
}

// The environment's defaults are the ones the Go configuration applies
// beside its fields (fanout.Config, workers.Config, riverbus.Config): a
// process configured only by RIVERBUS_ variables runs as a Client given a
// zero Config. envconfig needs its defaults as tag text, so this test is
// what keeps the two in step.
func TestEnvDefaultsAreTheGoDefaults(t *testing.T) {
	for _, s := range config.Settings() {
		t.Setenv(config.Prefix+"_"+s.Env, "")
		os.Unsetenv(config.Prefix + "_" + s.Env)
	}
	c, err := config.Load()
	require.NoError(t, err)
	require.Equal(t, fanout.GapTimeoutDefault, c.GapTimeout)
	require.Equal(t, fanout.GapCheckIntervalDefault, c.GapCheckInterval)
	require.Equal(t, fanout.PollIntervalDefault, c.PollInterval)
	require.Equal(t, fanout.BatchSizeDefault, c.BatchSize)
	require.Equal(t, fanout.BatchBytesDefault, c.BatchBytes)
	require.Equal(t, fanout.WorkersDefault, c.FanoutWorkers)
	require.Equal(t, fanout.MarkIntervalDefault, c.MarkInterval)
	require.Equal(t, riverbus.RetentionIntervalDefault, c.RetentionInterval)
	require.Equal(t, workers.CompletedJobRetentionPeriodDefault, c.CompletedJobRetention)
	require.Equal(t, workers.CancelledJobRetentionPeriodDefault, c.CancelledJobRetention)
	require.Equal(t, workers.FetchPollIntervalDefault, c.FetchPollInterval)
	// 0 is "forever" in the environment, -1 in workers.Config (River's
	// encoding), which is its default.
	require.Zero(t, c.DiscardedJobRetention)
}
