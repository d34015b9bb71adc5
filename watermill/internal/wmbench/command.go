package wmbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Main runs the riverbus-watermill-bench command line with args (without
// the program name) and returns the process exit code: 0, 1 when the bench
// or a scenario failed, 2 for bad usage. cmd/riverbus-watermill-bench only
// calls it.
//
// The same program is the bench's subscriber processes: the bench
// re-executes it with the hidden subcommand SubscriberCommand first, so a
// program that calls Run must hand such arguments to Main.
func Main(args []string, stdout, stderr io.Writer) int {
	return mainContext(context.Background(), args, stdout, stderr)
}

// mainContext is Main under ctx: a test bounds a bench with a deadline.
func mainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := command(stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %s\n", cmd.Name(), err)
	var uerr *usageError
	if errors.As(err, &uerr) {
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return 2
	}
	return 1
}

// usageError is bad usage: a flag or an argument that does not parse.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func command(stderr io.Writer) *cobra.Command {
	var (
		opts      Opts
		scenarios string
		logLevel  string
	)
	root := &cobra.Command{
		Use:   "riverbus-watermill-bench",
		Short: "Measure riverbus's Watermill adapter beside watermill-sql on this machine",
		Long: `Measures riverbus's Watermill Pub/Sub (github.com/riverbus/riverbus/watermill)
and watermill-sql v4 (DefaultPostgreSQLSchema) on the same PostgreSQL server in
the same run: publish throughput, consume throughput of a backlog with 1 and 4
subscriber processes, publish → handler latency at 200 and 1,000 messages/s,
and catch-up after a 100k backlog. It starts a throwaway PostgreSQL unless
--database-url or DATABASE_URL names a server (whose user must be allowed to
create databases), prints a table, each riverbus figure beside watermill-sql's
and their ratio, and writes the same as JSON.

Scenarios: ` + strings.Join(ScenarioNames(), ", ") + `.

Exit codes: 0 measured; 1 the bench or a scenario failed; 2 bad usage.`,
		Example: `  riverbus-watermill-bench                       # what make bench does
  riverbus-watermill-bench --scale 0.1           # a quick look
  riverbus-watermill-bench --scenario latency-200 --runs 3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return &usageError{err}
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return &usageError{fmt.Errorf("--log-level must be debug, info, warn or error, got %q", logLevel)}
			}
			if opts.DatabaseURL == "" {
				opts.DatabaseURL = os.Getenv("DATABASE_URL")
			}
			opts.Scenarios = splitList(scenarios)
			if _, _, err := normalize(opts); err != nil {
				return &usageError{err}
			}
			opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := Run(ctx, opts, cmd.OutOrStdout())
			return err
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	f := root.Flags()
	f.IntVar(&opts.Runs, "runs", 0, "measurements per scenario and side (default 1)")
	f.Float64Var(&opts.Scale, "scale", 0, "size and duration multiplier: 1 is the full benchmark, 0.1 a quick look (default 1)")
	f.StringVar(&scenarios, "scenario", "", "comma-separated scenarios to run (default: all)")
	f.StringVar(&opts.JSONPath, "json", "", "where to write the JSON report (default "+JSONPathDefault+")")
	// Its default is not shown: a URL may carry a password.
	f.StringVar(&opts.DatabaseURL, "database-url", "", "PostgreSQL URL (default: $DATABASE_URL; neither: a throwaway server)")
	f.StringVar(&logLevel, "log-level", "info", "progress on stderr: debug, info, warn or error")
	root.AddCommand(subscriberCommand())
	// No help subcommand: --help is the help, and the subcommand is hidden.
	root.SetHelpCommand(&cobra.Command{Hidden: true})
	return root
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}
