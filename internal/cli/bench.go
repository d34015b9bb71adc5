package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/internal/bench"
)

func (a *app) benchCommand() *cobra.Command {
	var (
		opts       bench.Opts
		scenarios  string
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure riverbus side by side with raw River on this machine",
		Long: `Runs each scenario a few times against a throwaway PostgreSQL (or DATABASE_URL,
whose user must be allowed to create databases) and prints a table of
medians and spreads, each riverbus figure beside raw River measured in the
same run, and writes the same as JSON. Scenarios: ` + strings.Join(bench.ScenarioNames(), ", ") + `.`,
		Example: `  riverbus bench                       # what make bench does
  riverbus bench --scale 0.1 --runs 1  # a quick look
  riverbus bench --scenario latency-200,rollback-gap
  riverbus bench --scenario latency-200 --cpuprofile cpu.out && go tool pprof -top cpu.out`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DatabaseURL = a.cfg.DatabaseURL
			opts.Scenarios = splitList(scenarios)
			opts.Logger = a.logger
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
			_, err := bench.Run(cmd.Context(), opts, a.stdout)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Runs, "runs", 0, "measurements per scenario (default 3)")
	f.Float64Var(&opts.Scale, "scale", 0, "size multiplier: 1 is the full benchmark (default 1)")
	f.StringVar(&scenarios, "scenario", "", "comma-separated scenarios to run (default: all)")
	f.StringVar(&opts.JSONPath, "json", "", "where to write the JSON report (default bench/results.json)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (fan-out, workers and load run in it, except the child processes of the backlog and scale-out scenarios) for go tool pprof")
	return cmd
}
