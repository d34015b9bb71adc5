package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/riverbus/riverbus/internal/bench/fanoutproc"
	"github.com/riverbus/riverbus/internal/bench/workerproc"
	"github.com/riverbus/riverbus/internal/benchkit"
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
	return benchkit.Execute(context.Background(), command(stdout, stderr), args, stdout, stderr)
}

// command is the root command: the bench, with the child processes as
// hidden subcommands.
func command(stdout, stderr io.Writer) *cobra.Command {
	// The environment's values are the flags' defaults; one that does not
	// parse fails the command after --help, which still works.
	cfg, envErr := config.Read()
	var cpuProfile string
	root := benchkit.NewRoot("riverbus-bench",
		"Measure riverbus side by side with raw River on this machine",
		`Runs each scenario a few times against a throwaway PostgreSQL (or DATABASE_URL,
whose user must be allowed to create databases) and prints a table of
medians and spreads, each riverbus figure beside raw River measured in the
same run, and writes the same as JSON. Scenarios: `+strings.Join(ScenarioNames(), ", ")+`.`,
		`  riverbus-bench                       # what make bench does
  riverbus-bench --scale 0.1 --runs 1  # a quick look
  riverbus-bench --scenario latency-200,rollback-gap
  riverbus-bench --scenario latency-200 --cpuprofile cpu.out && go tool pprof -top cpu.out`,
		defaults, ScenarioNames(),
		func(ctx context.Context, opts Opts) error {
			if envErr != nil {
				return benchkit.Usage(envErr)
			}
			if err := cfg.Validate(); err != nil {
				return benchkit.Usage(err)
			}
			if opts.DatabaseURL == "" {
				opts.DatabaseURL = cfg.DatabaseURL
			}
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
		})
	f := root.Flags()
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (fan-out, workers and load run in it, except the child processes of the backlog and scale-out scenarios) for go tool pprof")
	settingFlag(f, &cfg.LogLevel, "LOG_LEVEL")
	settingFlag(f, &cfg.LogFormat, "LOG_FORMAT")
	root.AddCommand(fanoutproc.Command(), workerproc.Command())
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
