package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/riverbus/riverbus/internal/bench/fanoutproc"
	"github.com/riverbus/riverbus/internal/bench/workerproc"
	"github.com/riverbus/riverbus/internal/config"
)

// Main runs the riverbus-bench command line with args (without the program
// name) and returns the process exit code: 0, 1 when the bench or a scenario
// failed, 2 for bad usage. cmd/riverbus-bench only calls it.
//
// The same program is the bench's child processes: the backlog and scale-out
// scenarios re-execute it with the hidden subcommand fanoutproc or
// workerproc first, so a program that calls Run must hand such arguments to
// Main.
func Main(args []string, stdout, stderr io.Writer) int {
	return mainContext(context.Background(), args, stdout, stderr)
}

// mainContext is Main under ctx: a test bounds a bench with a deadline.
func mainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := command(stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	// Prefixed by the child's name when a child failed, as its parent
	// quotes its last line of stderr.
	fmt.Fprintf(stderr, "%s: %s\n", cmd.Name(), printable(err.Error()))
	var uerr *usageError
	if errors.As(err, &uerr) {
		fmt.Fprintf(stderr, "\n%s", cmd.UsageString())
		return 2
	}
	return 1
}

// usageError is bad usage: a flag or a variable that does not parse.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// command is the root command: the bench, with the child processes as
// hidden subcommands.
func command(stdout, stderr io.Writer) *cobra.Command {
	// The environment's values are the flags' defaults; one that does not
	// parse fails the command after --help, which still works.
	cfg, envErr := config.Read()
	var (
		opts        Opts
		scenarios   string
		cpuProfile  string
		databaseURL string
	)
	root := &cobra.Command{
		Use:   "riverbus-bench",
		Short: "Measure riverbus side by side with raw River on this machine",
		Long: `Runs each scenario a few times against a throwaway PostgreSQL (or DATABASE_URL,
whose user must be allowed to create databases) and prints a table of
medians and spreads, each riverbus figure beside raw River measured in the
same run, and writes the same as JSON. Scenarios: ` + strings.Join(ScenarioNames(), ", ") + `.`,
		Example: `  riverbus-bench                       # what make bench does
  riverbus-bench --scale 0.1 --runs 1  # a quick look
  riverbus-bench --scenario latency-200,rollback-gap
  riverbus-bench --scenario latency-200 --cpuprofile cpu.out && go tool pprof -top cpu.out`,
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
			if envErr != nil {
				return &usageError{envErr}
			}
			if err := cfg.Validate(); err != nil {
				return &usageError{err}
			}
			if databaseURL != "" {
				cfg.DatabaseURL = databaseURL
			}
			// Only the bench stops on a signal: a child dies of it, as
			// before it was a subcommand.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts.DatabaseURL = cfg.DatabaseURL
			opts.Scenarios = splitList(scenarios)
			opts.Logger = newLogger(cfg, stderr)
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			_, err := Run(ctx, opts, stdout)
			return err
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	f := root.Flags()
	f.IntVar(&opts.Runs, "runs", 0, "measurements per scenario (default 3)")
	f.Float64Var(&opts.Scale, "scale", 0, "size multiplier: 1 is the full benchmark (default 1)")
	f.StringVar(&scenarios, "scenario", "", "comma-separated scenarios to run (default: all)")
	f.StringVar(&opts.JSONPath, "json", "", "where to write the JSON report (default bench/results.json)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (fan-out, workers and load run in it, except the child processes of the backlog and scale-out scenarios) for go tool pprof")
	// Its default is not shown: a URL may carry a password.
	f.StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (default: $DATABASE_URL or $RIVERBUS_DATABASE_URL)")
	settingFlag(f, &cfg.LogLevel, "LOG_LEVEL")
	settingFlag(f, &cfg.LogFormat, "LOG_FORMAT")
	root.AddCommand(fanoutproc.Command(), workerproc.Command())
	// No help subcommand: --help is the help, and the subcommands are
	// hidden.
	root.SetHelpCommand(&cobra.Command{Hidden: true})
	return root
}

// settingFlag adds the flag of the configuration variable env (without the
// prefix), as the riverbus command does, its default the environment's.
func settingFlag(f *pflag.FlagSet, p *string, env string) {
	s, ok := config.SettingOf(env)
	if !ok {
		panic("bench: no setting " + config.Prefix + "_" + env)
	}
	f.StringVar(p, s.Flag, *p, s.Desc+" (env "+config.Prefix+"_"+env+")")
}

// newLogger logs progress to stderr at the configured level and format.
func newLogger(cfg *config.Config, stderr io.Writer) *slog.Logger {
	level, _ := config.ParseLogLevel(cfg.LogLevel) // validated
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(stderr, opts))
	}
	return slog.New(slog.NewTextHandler(stderr, opts))
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

// printable escapes what would control the terminal (control and format
// characters, bytes that are not UTF-8) in an error, which may quote what
// a server or a child process printed.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
