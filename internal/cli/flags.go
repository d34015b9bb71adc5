package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/riverbus/riverbus/internal/config"
)

// The process settings (internal/config) are read from the environment
// once, when the command tree is built. Each command then binds the
// settings it uses to typed flags whose defaults are the values read, so
// --help shows what the command would run with, a flag given overrides its
// variable, and a command shows no flag it would ignore. The root's
// PersistentPreRunE validates the result.

// fanoutFlags adds the fan-out's settings: fanout and run.
func (a *app) fanoutFlags(cmd *cobra.Command) {
	f, c := cmd.Flags(), a.cfg
	durationSetting(f, &c.GapTimeout, "GAP_TIMEOUT")
	durationSetting(f, &c.GapCheckInterval, "GAP_CHECK_INTERVAL")
	durationSetting(f, &c.PollInterval, "POLL_INTERVAL")
	intSetting(f, &c.BatchSize, "BATCH_SIZE")
	intSetting(f, &c.BatchBytes, "BATCH_BYTES")
	intSetting(f, &c.FanoutWorkers, "FANOUT_WORKERS")
	durationSetting(f, &c.MarkInterval, "MARK_INTERVAL")
}

// retentionFlags adds the retention service's setting: fanout and run.
func (a *app) retentionFlags(cmd *cobra.Command) {
	durationSetting(cmd.Flags(), &a.cfg.RetentionInterval, "RETENTION_INTERVAL")
}

// jobRetentionFlags adds River's job retention settings: the commands that
// work jobs (run, work) and retention, which shows them.
func (a *app) jobRetentionFlags(cmd *cobra.Command) {
	f, c := cmd.Flags(), a.cfg
	durationSetting(f, &c.CompletedJobRetention, "COMPLETED_JOB_RETENTION")
	durationSetting(f, &c.CancelledJobRetention, "CANCELLED_JOB_RETENTION")
	durationSetting(f, &c.DiscardedJobRetention, "DISCARDED_JOB_RETENTION")
}

// fetchFlags adds River's fetch settings: the commands that work jobs.
func (a *app) fetchFlags(cmd *cobra.Command) {
	durationSetting(cmd.Flags(), &a.cfg.FetchPollInterval, "FETCH_POLL_INTERVAL")
}

// serveFlags adds the settings of River UI and the metrics endpoint: ui
// and run.
func (a *app) serveFlags(cmd *cobra.Command) {
	f, c := cmd.Flags(), a.cfg
	stringSetting(f, &c.UIAddr, "UI_ADDR")
	stringSetting(f, &c.UIUser, "UI_USER")
	secretSetting(f, &c.UIPassword, "UI_PASSWORD")
	listSetting(f, &c.UIAllowedHosts, "UI_ALLOWED_HOSTS")
	stringSetting(f, &c.MetricsAddr, "METRICS_ADDR")
	stringSetting(f, &c.MetricsUser, "METRICS_USER")
	secretSetting(f, &c.MetricsPassword, "METRICS_PASSWORD")
}

// logFlags adds the log settings: every command logs.
func (a *app) logFlags(f *pflag.FlagSet) {
	stringSetting(f, &a.cfg.LogLevel, "LOG_LEVEL")
	stringSetting(f, &a.cfg.LogFormat, "LOG_FORMAT")
}

// databaseFlag adds --database-url to f: every command that connects (the
// persistent flags of a group of them). Its default is not shown: a URL
// may carry a password.
func (a *app) databaseFlag(f *pflag.FlagSet) {
	f.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL (default: $DATABASE_URL or $RIVERBUS_DATABASE_URL)")
}

// setting returns the flag name and usage of the variable env (without
// the prefix). It panics when no setting has that variable: a typo here
// fails every test that builds the command tree.
func setting(env string) (name, usage string) {
	s, ok := config.SettingOf(env)
	if !ok {
		panic("cli: no setting " + config.Prefix + "_" + env)
	}
	return s.Flag, s.Desc + " (env " + config.Prefix + "_" + env + ")"
}

func durationSetting(f *pflag.FlagSet, p *time.Duration, env string) {
	name, usage := setting(env)
	f.DurationVar(p, name, *p, usage)
}

func intSetting(f *pflag.FlagSet, p *int, env string) {
	name, usage := setting(env)
	f.IntVar(p, name, *p, usage)
}

func stringSetting(f *pflag.FlagSet, p *string, env string) {
	name, usage := setting(env)
	f.StringVar(p, name, *p, usage)
}

// secretSetting is stringSetting for a password: --help does not print the
// value the environment gave.
func secretSetting(f *pflag.FlagSet, p *string, env string) {
	stringSetting(f, p, env)
	name, _ := setting(env)
	f.Lookup(name).DefValue = ""
}

// listSetting takes comma-separated values, or the flag repeated.
func listSetting(f *pflag.FlagSet, p *[]string, env string) {
	name, usage := setting(env)
	f.StringSliceVar(p, name, *p, usage)
}

// flagError makes a flag that does not parse a usage error (exit 2), and
// says what a flag of its type wants instead of quoting strconv.
func flagError(cmd *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) {
		f := invalid.GetFlag()
		if want, ok := flagWants[f.Value.Type()]; ok {
			err = fmt.Errorf("invalid argument %q for \"--%s\" flag: %s", invalid.GetValue(), f.Name, want)
		}
	}
	return &usageError{cmd: cmd, err: err}
}

var flagWants = map[string]string{
	"duration": "want a duration such as 5s or 250ms",
	"int":      "want a whole number",
	"int64":    "want a whole number",
	"float64":  "want a number such as 0.5",
	"bool":     "want true or false",
}

// configTable renders the configuration table of docs/configuration.md: one row per
// setting with its variable, its flag and the commands that take it, its
// default and its description. The rows come from internal/config's
// struct tags, the commands from root's tree.
func configTable(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| variable | flag | commands | default | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, s := range config.Settings() {
		name, flag := "`"+config.Prefix+"_"+s.Env+"`", "`--"+s.Flag+"`"
		if s.Env == "DATABASE_URL" {
			name = "`DATABASE_URL` or " + name
		}
		def := "(empty)"
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", name, flag, commandsTaking(root, s.Flag, config.Prefix+"_"+s.Env), def, s.Desc)
	}
	return b.String()
}

// commandsTaking names the top-level commands with the setting's flag (a
// group has it when one of its subcommands does): "every command", "every
// command but `dev`", or a list. A flag of the same name that is a
// command's own (backfill's --batch-size) does not count: only one whose
// usage names the setting's variable, env.
func commandsTaking(root *cobra.Command, flag, env string) string {
	var with, without []string
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if takesFlag(c, flag, env) {
			with = append(with, "`"+c.Name()+"`")
		} else {
			without = append(without, "`"+c.Name()+"`")
		}
	}
	switch {
	case len(with) == 0:
		return "(none)"
	case len(without) == 0:
		return "every command"
	case len(without) <= 2 && len(with) > 2:
		return "every command but " + strings.Join(without, ", ")
	}
	slices.Sort(with)
	return strings.Join(with, ", ")
}

// takesFlag reports whether cmd or one of its subcommands has the flag of
// the variable env, its own or inherited.
func takesFlag(cmd *cobra.Command, flag, env string) bool {
	if !cmd.HasSubCommands() {
		cmd.InheritedFlags() // merges the parents' persistent flags into Flags
		f := cmd.Flags().Lookup(flag)
		return f != nil && strings.Contains(f.Usage, env)
	}
	for _, c := range cmd.Commands() {
		if takesFlag(c, flag, env) {
			return true
		}
	}
	return false
}
