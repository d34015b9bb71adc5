// Package cli is the riverbus command line: cmd/riverbus only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/config"
	"github.com/riverbus/riverbus/internal/pooler"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
)

// Main runs the command line with args (without the program name) and
// returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return mainContext(ctx, args, stdout, stderr)
}

// mainContext is Main under ctx: a test ends a long-running command by
// cancelling it, as Ctrl-C does.
func mainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &app{stdout: stdout, stderr: stderr}
	root := app.rootCommand()
	root.SetArgs(joinOptionalValues(root, args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	if cmd, err := root.ExecuteContextC(ctx); err != nil {
		err = pooler.Explain(err)
		var xerr *exitError
		if errors.As(err, &xerr) {
			fmt.Fprintf(stderr, "riverbus: %s\n", safe(err.Error()))
			return xerr.code
		}
		var uerr *usageError
		if errors.As(err, &uerr) {
			fmt.Fprintf(stderr, "riverbus: %s\n\n%s", uerr.err, uerr.cmd.UsageString())
			return 2
		}
		if isCobraUsage(err.Error()) {
			fmt.Fprintf(stderr, "riverbus: %s\n\n%s", err, cmd.UsageString())
			return 2
		}
		if isBadInput(err) {
			fmt.Fprintf(stderr, "riverbus: %s\n\n%s", safe(err.Error()), cmd.UsageString())
			return 2
		}
		if migrations.AsSchemaTooNew(err) != nil {
			fmt.Fprintf(stderr, "riverbus: %s\n", safe(err.Error()))
			return exitSchemaTooNew
		}
		// An error may quote an event's type, key or a handler's error.
		fmt.Fprintf(stderr, "riverbus: %s\n", safe(err.Error()))
		return 1
	}
	return 0
}

// Command returns the command tree that Main runs, as the environment
// configures it, for checks that the commands and flags the documentation
// shows exist. Running it is Main's job.
func Command() *cobra.Command {
	return (&app{stdout: io.Discard, stderr: io.Discard}).rootCommand()
}

type app struct {
	stdout, stderr io.Writer
	cfg            *config.Config // the environment's values, then the flags'
	envErr         error          // a variable that did not parse
	logger         *slog.Logger
	riverLogger    *slog.Logger // River's info logs are one line per job: warn and up only
	databaseURL    string       // --database-url, overrides the environment
	// tracerProvider traces the fan-out and the workers; nil unless
	// startTracing found tracing asked for.
	tracerProvider trace.TracerProvider
	// processName is how status names this process ("riverbus work
	// --pool billing"): its command, without arguments that may hold
	// secrets.
	processName string
}

// isCobraUsage reports whether msg is one of cobra's own usage errors: a
// required flag or flag group missing, flags that exclude each other, an
// unknown command.
func isCobraUsage(msg string) bool {
	for _, prefix := range []string{"required flag(s)", "unknown command", "at least one of the flags in the group", "if any flags in the group"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }

// exitError ends a command that did what it was asked with an exit code of
// its own, for an outcome a script must tell from a failure (1) or bad
// input (2): a replay whose events became dead letters exits
// exitReplayDeadLetters.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func (a *app) rootCommand() *cobra.Command {
	// Read once, before the flags are made: the values read are their
	// defaults. A variable that does not parse fails the command (after
	// --help, which still works) in PersistentPreRunE.
	a.cfg, a.envErr = config.Read()
	root := &cobra.Command{
		Use:   "riverbus",
		Short: "Gap-safe, leaderless fan-out of PostgreSQL events into River jobs",
		Long: `riverbus turns events appended to PostgreSQL into River jobs, one per event
per consumer pool, and lets any number of worker processes share them.

Configuration comes from RIVERBUS_* environment variables (and DATABASE_URL);
flags override them. Each command has the flags of the settings it uses (see
its --help, and docs/configuration.md). run, fanout and work trace
with OpenTelemetry when the standard OTEL_* variables ask for it
(OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318; see docs/operations.md, "Tracing").`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.envErr != nil {
				return &usageError{cmd: cmd, err: a.envErr}
			}
			cfg := a.cfg
			cfg.UIAllowedHosts = config.TrimList(cfg.UIAllowedHosts) // --ui-allowed-hosts "a, b"
			if err := cfg.Validate(); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			if a.databaseURL != "" {
				cfg.DatabaseURL = a.databaseURL
			}
			level, _ := config.ParseLogLevel(cfg.LogLevel)
			opts := &slog.HandlerOptions{Level: level}
			riverOpts := &slog.HandlerOptions{Level: max(level, slog.LevelWarn)}
			if cfg.LogFormat == "json" {
				a.logger = slog.New(slog.NewJSONHandler(a.stderr, opts))
				a.riverLogger = slog.New(slog.NewJSONHandler(a.stderr, riverOpts))
			} else {
				a.logger = slog.New(slog.NewTextHandler(a.stderr, opts))
				a.riverLogger = slog.New(slog.NewTextHandler(a.stderr, riverOpts))
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(flagError)
	a.logFlags(root.PersistentFlags())
	// Every command but dev connects to a database.
	connecting := []*cobra.Command{
		a.migrateCommand(),
		a.poolCommand(),
		a.fanoutCommand(),
		a.runCommand(),
		a.uiCommand(),
		a.workCommand(),
		a.tailCommand(),
		a.statusCommand(),
		a.dlqCommand(),
		a.appendCommand(),
		a.backfillCommand(),
		a.repairCommand(),
		a.retentionCommand(),
	}
	for _, c := range connecting {
		a.databaseFlag(c.PersistentFlags())
	}
	root.AddCommand(connecting...)
	root.AddCommand(a.devCommand())
	return root
}

// isBadInput reports whether err rejects what the user gave (a pool's
// settings, an event) rather than a failure to do it: such an error exits
// 2 with the usage, like a flag that does not parse.
func isBadInput(err error) bool {
	return errors.Is(err, bustype.ErrInvalidPool) || errors.Is(err, outbox.ErrInvalidEvent) || errors.Is(err, errInvalidDatabaseURL)
}

// errInvalidDatabaseURL is a database URL that does not parse: a setting
// that does not parse, so bad input (exit 2), like any other.
var errInvalidDatabaseURL = errors.New("invalid database URL")

// joinOptionalValues rewrites "--watch 10s" as "--watch=10s". pflag never
// hands the next argument to a flag that has a value of its own when given
// bare (NoOptDefVal: "--watch" alone means every 2s), so without this the
// interval would be taken as an argument. A next argument that is not a
// flag is joined, so "--watch soon" is refused as a bad interval.
func joinOptionalValues(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			return append(out, args[i:]...)
		}
		if name, ok := strings.CutPrefix(arg, "--"); ok && i+1 < len(args) {
			f := cmd.Flags().Lookup(name)
			if f != nil && f.NoOptDefVal != "" && f.Value.Type() == "duration" {
				if next := args[i+1]; !strings.HasPrefix(next, "-") {
					out = append(out, arg+"="+next)
					i++
					continue
				}
			}
		}
		out = append(out, arg)
	}
	return out
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{cmd: cmd, err: fmt.Errorf("%s expects %s, got %d argument(s)", cmd.CommandPath(), what, len(args))}
		}
		return nil
	}
}

// requireURL returns the database URL or an error that says how to give one.
func (a *app) requireURL() (string, error) {
	if a.cfg.DatabaseURL == "" {
		return "", errors.New("no database: set DATABASE_URL (or RIVERBUS_DATABASE_URL, or --database-url), or start one with `riverbus dev`")
	}
	return a.cfg.DatabaseURL, nil
}

// describeHost names the server a URL points at, without credentials.
func describeHost(rawURL string) string {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		if u, uerr := url.Parse(rawURL); uerr == nil && u.Host != "" {
			return u.Host
		}
		return "(unparsable DATABASE_URL)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}

// connect opens a pool, checks the server answers and the schema is there
// (requireSchema), once: for commands that do one thing and exit.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := a.connectUnmigrated(ctx)
	if err != nil {
		return nil, err
	}
	if err := requireSchema(ctx, pool, a.cfg.DatabaseURL); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// sqlSchemaPresent: to_regclass needs no privilege on the tables, so it
// answers for every role.
const sqlSchemaPresent = `SELECT to_regclass('riverbus_pool') IS NOT NULL AND to_regclass('river_job') IS NOT NULL`

// requireSchema returns an error that says to run `riverbus migrate` when
// the database has no riverbus schema, instead of letting the command fail
// on its first query with "relation ... does not exist".
func requireSchema(ctx context.Context, db *pgxpool.Pool, rawURL string) error {
	var present bool
	if err := db.QueryRow(ctx, sqlSchemaPresent).Scan(&present); err != nil {
		return fmt.Errorf("check the riverbus schema: %w", err)
	}
	if !present {
		return fmt.Errorf("the database at %s has no riverbus schema: run `riverbus migrate` first", describeHost(rawURL))
	}
	return nil
}

// connectUnmigrated is connect without the schema check: for migrate.
func (a *app) connectUnmigrated(ctx context.Context) (*pgxpool.Pool, error) {
	u, err := a.requireURL()
	if err != nil {
		return nil, err
	}
	cfg, err := poolConfig(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("invalid database URL: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s: %w", describeHost(u), err)
	}
	return pool, nil
}

// poolConfig parses a database URL into the configuration of a pool whose
// sessions run with riverbus's own limits (riverbus.ConfigurePool), whatever
// a DBA set for the database or the role.
func poolConfig(rawURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errInvalidDatabaseURL, err)
	}
	riverbus.ConfigurePool(cfg)
	return cfg, nil
}

// connectRetrying opens a pool and waits, with backoff, until the server
// answers or ctx ends: for long-running commands, which must ride out a
// database that is down. It refuses a URL through a transaction pooler
// (pooler.Check), naming the command (who) and the fix: each of these
// commands LISTENs or runs River's leadership and notifier.
func (a *app) connectRetrying(ctx context.Context, rawURL, who string) (*pgxpool.Pool, error) {
	return a.connectRetryingConns(ctx, rawURL, who, 10)
}

// connectRetryingConns is connectRetrying with a pool of at least conns
// connections (unless the URL's pool_max_conns says more).
func (a *app) connectRetryingConns(ctx context.Context, rawURL, who string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(rawURL)
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns < conns {
		cfg.MaxConns = conns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("invalid database URL: %w", err)
	}
	backoff := 250 * time.Millisecond
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pool.Ping(pingCtx)
		cancel()
		msg := "database unreachable; retrying"
		if err == nil {
			err = pooler.Check(ctx, cfg.ConnConfig, who)
			if err == nil {
				return pool, nil
			}
			// A pooler found is the operator's to fix. Anything else is
			// the check not made: a server that answered the ping and then
			// went (a crash, a restart, a failover) or ran out of
			// connections is a database that is down, ridden out as one.
			if errors.Is(err, pooler.ErrTransactionPooler) {
				pool.Close()
				return nil, err
			}
			msg = "database answered, then failed the check for a connection pooler; retrying"
		}
		if ctx.Err() != nil {
			pool.Close()
			return nil, ctx.Err()
		}
		wait := backoff + time.Duration(rand.Int64N(int64(backoff/4)+1))
		a.logger.Warn(msg, "host", describeHost(rawURL), "error", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			pool.Close()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 15*time.Second)
	}
}

func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}
