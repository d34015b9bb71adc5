// Package config reads the riverbus process configuration from the
// environment, once, with envconfig. Only variables with the RIVERBUS_ prefix
// are read, and DATABASE_URL, which is also accepted without it, as River's
// CLI does; RIVERBUS_DATABASE_URL wins when both are set.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// Prefix is the prefix of every riverbus environment variable.
const Prefix = "RIVERBUS"

// MarkIntervalMin is the least RIVERBUS_MARK_INTERVAL: a mark is a row,
// and the fan-out keeps the newest 2,000,000 of them, so a shorter
// interval would keep hours, not days, of rewind history under steady
// traffic.
const MarkIntervalMin = 100 * time.Millisecond

// Config is the whole process configuration. The configuration table
// of docs/configuration.md lists these fields, with the commands whose flags override them
// (internal/cli renders it; a test there keeps the two in step).
//
// Each envconfig tag is the full variable name, prefix included, and the
// struct is processed without a prefix: envconfig falls back from
// PREFIX_NAME to the bare tag when the prefixed variable is unset, which
// would let an unrelated LOG_LEVEL or UI_PASSWORD in the environment
// configure riverbus (reported under the RIVERBUS_ name when it was bad).
// With the prefix in the tag, the key and the fallback are the same name.
type Config struct {
	DatabaseURL string `envconfig:"RIVERBUS_DATABASE_URL" desc:"PostgreSQL URL; RIVERBUS_DATABASE_URL wins when both are set. Empty: make run and riverbus dev start a throwaway local server; other commands refuse to start."`

	GapTimeout       time.Duration `envconfig:"RIVERBUS_GAP_TIMEOUT" default:"5s" desc:"How long the horizon waits for a missing sequence that cannot yet be proven rolled back before it skips it (and watches it for a late commit)."`
	GapCheckInterval time.Duration `envconfig:"RIVERBUS_GAP_CHECK_INTERVAL" default:"10ms" desc:"How often the horizon re-checks while a gap is open, so a rolled-back gap is passed within about this long."`
	PollInterval     time.Duration `envconfig:"RIVERBUS_POLL_INTERVAL" default:"1s" desc:"Fan-out poll interval: the longest a lost NOTIFY or a dropped listener connection can delay delivery."`
	BatchSize        int           `envconfig:"RIVERBUS_BATCH_SIZE" default:"1000" desc:"Most events a pool turns into jobs in one fan-out transaction."`
	BatchBytes       int           `envconfig:"RIVERBUS_BATCH_BYTES" default:"67108864" desc:"Most bytes of events (as stored, compressed where PostgreSQL compressed them) a pool turns into jobs in one fan-out transaction; a bigger event is a batch of its own. Payloads never enter the fan-out's memory: this bounds each transaction's work in the database."`
	FanoutWorkers    int           `envconfig:"RIVERBUS_FANOUT_WORKERS" default:"4" desc:"Pools one fan-out process works on at the same time."`
	MarkInterval     time.Duration `envconfig:"RIVERBUS_MARK_INTERVAL" default:"5s" desc:"How often, at most, the horizon records when events committed (a mark), for pool reset --to-time: such a reset re-delivers the events committed in up to about this long before the time too. The newest 2,000,000 marks are kept: about 116 days of history at 5s, 23 days at 1s. At least 100ms."`

	RetentionInterval     time.Duration `envconfig:"RIVERBUS_RETENTION_INTERVAL" default:"1m" desc:"How often a fan-out process (run, fanout) applies the event retention policy set with riverbus retention set; 0: never in this process. Without a policy nothing is deleted."`
	CompletedJobRetention time.Duration `envconfig:"RIVERBUS_COMPLETED_JOB_RETENTION" default:"24h" desc:"How long River's cleaner keeps completed jobs in river_job (and River UI); 0: forever. River's cleaner runs in a process that works jobs."`
	CancelledJobRetention time.Duration `envconfig:"RIVERBUS_CANCELLED_JOB_RETENTION" default:"24h" desc:"How long River's cleaner keeps cancelled jobs in river_job; 0: forever."`
	DiscardedJobRetention time.Duration `envconfig:"RIVERBUS_DISCARDED_JOB_RETENTION" default:"0s" desc:"How long River's cleaner keeps discarded jobs in river_job; 0: forever. Dead letters stay in riverbus_dead_letter either way."`
	FetchPollInterval     time.Duration `envconfig:"RIVERBUS_FETCH_POLL_INTERVAL" default:"100ms" desc:"How often a worker process polls each River queue it works for jobs, on top of the insert notifications that wake it at once: the longest a lost notification delays a job. Each poll is a transaction, per queue: with hundreds of pools, 1s cuts an idle worker process's load about tenfold."`

	UIAddr          string   `envconfig:"RIVERBUS_UI_ADDR" default:"127.0.0.1:8080" desc:"Address River UI listens on. A non-loopback address requires RIVERBUS_UI_USER and RIVERBUS_UI_PASSWORD."`
	UIUser          string   `envconfig:"RIVERBUS_UI_USER" desc:"Basic-auth user for River UI; with RIVERBUS_UI_PASSWORD, the UI requires it."`
	UIPassword      string   `envconfig:"RIVERBUS_UI_PASSWORD" desc:"Basic-auth password for River UI."`
	UIAllowedHosts  []string `envconfig:"RIVERBUS_UI_ALLOWED_HOSTS" desc:"Comma-separated host or host:port names a reverse proxy forwards River UI and metrics requests under. Requests for any other Host than the address served are refused (DNS rebinding)."`
	MetricsAddr     string   `envconfig:"RIVERBUS_METRICS_ADDR" default:"127.0.0.1:9090" desc:"Address of the Prometheus metrics endpoint (/metrics). Empty disables it. A non-loopback address requires RIVERBUS_METRICS_USER and RIVERBUS_METRICS_PASSWORD."`
	MetricsUser     string   `envconfig:"RIVERBUS_METRICS_USER" desc:"Basic-auth user for the metrics endpoints (RIVERBUS_METRICS_ADDR and RIVERBUS_PROCESS_METRICS_ADDR); with RIVERBUS_METRICS_PASSWORD, scrapes require it."`
	MetricsPassword string   `envconfig:"RIVERBUS_METRICS_PASSWORD" desc:"Basic-auth password for the metrics endpoints."`
	// ProcessMetricsAddr has no default: fanout and work run many to a
	// host, and a default port would make the second one fail.
	ProcessMetricsAddr string `envconfig:"RIVERBUS_PROCESS_METRICS_ADDR" desc:"Address where fanout and work serve this process's own metrics (/metrics: fan-out round and batch times, Go runtime, process), not the database-wide figures run and ui serve. Empty (the default) disables it. A non-loopback address requires RIVERBUS_METRICS_USER and RIVERBUS_METRICS_PASSWORD."`

	LogLevel  string `envconfig:"RIVERBUS_LOG_LEVEL" default:"info" desc:"Log level: debug, info, warn or error."`
	LogFormat string `envconfig:"RIVERBUS_LOG_FORMAT" default:"text" desc:"Log format: text or json."`
}

// Load reads the configuration from the environment and validates it. Its
// error names the offending variable.
func Load() (*Config, error) {
	c, err := Read()
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Read reads the configuration from the environment without validating it:
// the command line takes its values as the defaults of its flags and
// validates once the flags are parsed, so a flag can override a variable.
// Its error names a variable whose value does not parse; the Config it
// returns then holds what was read before that variable.
func Read() (*Config, error) {
	var c Config
	// No prefix here: the tags carry it (see Config).
	if err := envconfig.Process("", &c); err != nil {
		var perr *envconfig.ParseError
		if errors.As(err, &perr) {
			want := perr.TypeName
			switch perr.TypeName {
			case "time.Duration":
				want = "duration such as 5s or 250ms"
			case "int":
				want = "whole number"
			}
			return &c, fmt.Errorf("invalid %s=%q: want a %s", perr.KeyName, perr.Value, want)
		}
		return &c, fmt.Errorf("read configuration: %w", err)
	}
	if _, ok := os.LookupEnv(Prefix + "_DATABASE_URL"); !ok {
		c.DatabaseURL = os.Getenv("DATABASE_URL")
	}
	c.UIAllowedHosts = TrimList(c.UIAllowedHosts)
	return &c, nil
}

// TrimList trims each item and drops the empty ones: "a, b," is a and b.
func TrimList(items []string) []string {
	var out []string
	for _, item := range items {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Setting describes one configuration field: its environment variable
// (without the prefix), the command-line flag that overrides it, its
// default and its description, from the field's tags.
type Setting struct {
	Env, Flag, Default, Desc string
}

// Settings lists every field of Config in order.
func Settings() []Setting {
	t := reflect.TypeOf(Config{})
	out := make([]Setting, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		env := strings.TrimPrefix(f.Tag.Get("envconfig"), Prefix+"_")
		out[i] = Setting{Env: env, Flag: flagName(env),
			Default: f.Tag.Get("default"), Desc: f.Tag.Get("desc")}
	}
	return out
}

// SettingOf returns the Setting of the variable env (without the prefix),
// or false when no field has it.
func SettingOf(env string) (Setting, bool) {
	for _, s := range Settings() {
		if s.Env == env {
			return s, true
		}
	}
	return Setting{}, false
}

// flagName is the flag of a variable: GAP_TIMEOUT is --gap-timeout.
func flagName(env string) string { return strings.ToLower(strings.ReplaceAll(env, "_", "-")) }

// Validate checks every field and names the variable (RIVERBUS_X, or flag
// --x) of the first bad one.
func (c *Config) Validate() error {
	v := func(name string) string { return Prefix + "_" + name + " (--" + flagName(name) + ")" }
	switch {
	case c.GapTimeout <= 0:
		return fmt.Errorf("%s must be positive, got %s", v("GAP_TIMEOUT"), c.GapTimeout)
	case c.GapCheckInterval <= 0:
		return fmt.Errorf("%s must be positive, got %s", v("GAP_CHECK_INTERVAL"), c.GapCheckInterval)
	case c.PollInterval <= 0:
		return fmt.Errorf("%s must be positive, got %s", v("POLL_INTERVAL"), c.PollInterval)
	case c.BatchSize < 1 || c.BatchSize > 100_000:
		return fmt.Errorf("%s must be between 1 and 100000, got %d", v("BATCH_SIZE"), c.BatchSize)
	case c.BatchBytes < 1:
		return fmt.Errorf("%s must be a positive number of bytes, got %d", v("BATCH_BYTES"), c.BatchBytes)
	case c.FanoutWorkers < 1 || c.FanoutWorkers > 1000:
		return fmt.Errorf("%s must be between 1 and 1000, got %d", v("FANOUT_WORKERS"), c.FanoutWorkers)
	case c.MarkInterval < MarkIntervalMin:
		return fmt.Errorf("%s must be at least %s, got %s", v("MARK_INTERVAL"), MarkIntervalMin, c.MarkInterval)
	case c.RetentionInterval < 0:
		return fmt.Errorf("%s must not be negative, got %s", v("RETENTION_INTERVAL"), c.RetentionInterval)
	case c.CompletedJobRetention < 0:
		return fmt.Errorf("%s must not be negative, got %s", v("COMPLETED_JOB_RETENTION"), c.CompletedJobRetention)
	case c.CancelledJobRetention < 0:
		return fmt.Errorf("%s must not be negative, got %s", v("CANCELLED_JOB_RETENTION"), c.CancelledJobRetention)
	case c.DiscardedJobRetention < 0:
		return fmt.Errorf("%s must not be negative, got %s", v("DISCARDED_JOB_RETENTION"), c.DiscardedJobRetention)
	case (c.UIUser == "") != (c.UIPassword == ""):
		return fmt.Errorf("%s and %s must be set together", v("UI_USER"), v("UI_PASSWORD"))
	case (c.MetricsUser == "") != (c.MetricsPassword == ""):
		return fmt.Errorf("%s and %s must be set together", v("METRICS_USER"), v("METRICS_PASSWORD"))
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		return fmt.Errorf("%s: %w", v("LOG_LEVEL"), err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("%s must be text or json, got %q", v("LOG_FORMAT"), c.LogFormat)
	}
	for _, h := range c.UIAllowedHosts {
		if h = strings.TrimSpace(h); h == "" || strings.ContainsAny(h, "/@?# ") {
			return fmt.Errorf("%s: want host or host:port names separated by commas, got %q", v("UI_ALLOWED_HOSTS"), h)
		}
	}
	for name, addr := range map[string]string{"UI_ADDR": c.UIAddr, "METRICS_ADDR": c.MetricsAddr, "PROCESS_METRICS_ADDR": c.ProcessMetricsAddr} {
		if addr == "" && name != "UI_ADDR" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s must be host:port, got %q: %w", v(name), addr, err)
		}
	}
	return nil
}

// ParseLogLevel parses debug, info, warn or error.
func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(s))); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error, got %q", s)
	}
	return l, nil
}
