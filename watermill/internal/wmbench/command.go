package wmbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/internal/benchkit"
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
	return benchkit.Execute(context.Background(), command(stdout, stderr), args, stdout, stderr)
}

func command(stdout, stderr io.Writer) *cobra.Command {
	var logLevel string
	root := benchkit.NewRoot("riverbus-watermill-bench",
		"Measure riverbus's Watermill adapter beside watermill-sql on this machine",
		`Measures riverbus's Watermill Pub/Sub (github.com/riverbus/riverbus/watermill)
and watermill-sql v4 (DefaultPostgreSQLSchema) on the same PostgreSQL server in
the same run: publish throughput, consume throughput of a backlog with 1 and 4
subscriber processes, publish → handler latency at 200 and 1,000 messages/s,
and catch-up after a 100k backlog. It starts a throwaway PostgreSQL unless
--database-url or DATABASE_URL names a server (whose user must be allowed to
create databases), prints a table, each riverbus figure beside watermill-sql's
and their ratio, and writes the same as JSON.

Scenarios: `+strings.Join(ScenarioNames(), ", ")+`.

Exit codes: 0 measured; 1 the bench or a scenario failed; 2 bad usage.`,
		`  riverbus-watermill-bench                       # what make bench does
  riverbus-watermill-bench --scale 0.1           # a quick look
  riverbus-watermill-bench --scenario latency-200 --runs 3`,
		defaults, ScenarioNames(),
		func(ctx context.Context, opts Opts) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return benchkit.Usage(fmt.Errorf("--log-level must be debug, info, warn or error, got %q", logLevel))
			}
			if opts.DatabaseURL == "" {
				opts.DatabaseURL = os.Getenv("DATABASE_URL")
			}
			opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			_, err := Run(ctx, opts, stdout)
			return err
		})
	root.Flags().StringVar(&logLevel, "log-level", "info", "progress on stderr: debug, info, warn or error")
	root.AddCommand(subscriberCommand())
	return root
}
