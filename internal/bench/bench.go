package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// Defaults of Opts fields.
const (
	RunsDefault     = 3
	ScaleDefault    = 1.0
	JSONPathDefault = "bench/results.json"
)

// Opts configures Run. Zero fields take their defaults.
type Opts struct {
	// DatabaseURL is a PostgreSQL server to measure on; its user must be
	// allowed to create databases. Every measurement gets a database of its
	// own, dropped afterwards. Empty: start a throwaway server (fsync and
	// synchronous_commit on: PostgreSQL's default durability) and stop it at the end.
	DatabaseURL string
	// Runs is how many times each scenario is measured. Zero: RunsDefault.
	Runs int
	// Scale multiplies every size and duration: 1 is the full benchmark,
	// CI's smoke check uses 0.01 or less. Sizes never go below a small
	// minimum. Zero: ScaleDefault.
	Scale float64
	// Scenarios selects scenarios by name (see ScenarioNames). Empty: all.
	Scenarios []string
	// JSONPath is where the report is written as JSON; its directory is
	// created. Zero: JSONPathDefault.
	JSONPath string
	// Logger receives progress, and warnings from River and the fan-out.
	// Nil: nothing is logged.
	Logger *slog.Logger
}

// Report is what Run measured.
type Report struct {
	StartedAt       time.Time `json:"started_at"`
	DurationSeconds float64   `json:"duration_seconds"`
	Runs            int       `json:"runs"`
	Scale           float64   `json:"scale"`
	// Server describes the PostgreSQL server and its durability settings.
	Server          string `json:"server"`
	PostgresVersion string `json:"postgres_version"`
	GoVersion       string `json:"go_version"`
	RiverVersion    string `json:"river_version,omitempty"`
	NumCPU          int    `json:"num_cpu"`
	// Results has one row per scenario and metric, in scenario order.
	Results []Result `json:"results"`
	// JSONPath is where the report was written.
	JSONPath string `json:"-"`
}

// Result is one row of the report: one metric of one scenario.
type Result struct {
	Scenario string `json:"scenario"`
	Metric   string `json:"metric"`
	// Unit of Riverbus and Baseline: "jobs/s", "ms", "s", "MB" or "x".
	Unit string `json:"unit"`
	// Riverbus is riverbus's figure; nil when the scenario was skipped or
	// failed.
	Riverbus *Figure `json:"riverbus,omitempty"`
	// Baseline is raw River's figure in the same run; nil: no raw River
	// equivalent.
	Baseline *Figure `json:"baseline,omitempty"`
	// Ratio is Riverbus/Baseline computed per run.
	Ratio *Figure `json:"ratio,omitempty"`
	// Target is what riverbus should reach; nil: none.
	Target *Target `json:"target,omitempty"`
	// Met says whether the median meets Target; nil when there is no
	// target or no figure.
	Met *bool `json:"met,omitempty"`
	// Skipped says why the scenario did not run.
	Skipped string `json:"skipped,omitempty"`
	// Error is why the scenario failed.
	Error string `json:"error,omitempty"`
	// Note adds context: sizes, achieved rates, settings.
	Note string `json:"note,omitempty"`
}

// Figure summarises one figure over runs.
type Figure = benchkit.Figure

// Target is a bound on the ratio ("ratio") or on riverbus's own figure
// ("riverbus"), with Op ">=" or "<=".
type Target struct {
	Of    string  `json:"of"`
	Op    string  `json:"op"`
	Value float64 `json:"value"`
}

// scenario is one named benchmark. run measures every run and returns the
// scenario's rows.
type scenario struct {
	name string
	run  func(ctx context.Context, e *env) ([]Result, error)
}

var scenarios = []scenario{
	{"fanout-1pool", func(ctx context.Context, e *env) ([]Result, error) { return runFanout(ctx, e, "fanout-1pool", 1) }},
	{"fanout-4pools", func(ctx context.Context, e *env) ([]Result, error) { return runFanout(ctx, e, "fanout-4pools", 4) }},
	{"drain", runDrain},
	{"drain-args", runDrainArgs},
	{"latency-200", func(ctx context.Context, e *env) ([]Result, error) {
		return runLatency(ctx, e, "latency-200", latencyOpts{rate: 200})
	}},
	{"latency-200-loaded", func(ctx context.Context, e *env) ([]Result, error) {
		return runLatency(ctx, e, "latency-200-loaded", latencyOpts{rate: 200, loaded: true})
	}},
	{"latency-1000", func(ctx context.Context, e *env) ([]Result, error) {
		return runLatency(ctx, e, "latency-1000", latencyOpts{rate: 1000})
	}},
	{"many-pools", runManyPools},
	{"rollback-gap", runRollbackGap},
	{"backlog", runBacklog},
	{"ordered-vs-unordered", runOrdered},
	{"big-transaction", runBigTx},
	{"live-during-rebuild", runLiveDuringRebuild},
	{"scale-out", runScaleOut},
	{"retention", runRetention},
}

// ScenarioNames returns the names Opts.Scenarios accepts, in the order Run
// runs them.
func ScenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
}

// Run measures the selected scenarios, prints a table of the results and the
// path of the JSON report to stdout, writes the JSON report, and returns the
// report. A scenario that fails is recorded in the report with its error, the
// others still run, and Run then returns the report with an error naming the
// failed scenarios.
//
// The backlog and scale-out scenarios start their child processes by
// re-executing this program (os.Executable) with the hidden subcommand
// fanoutproc or workerproc first: the program must hand those arguments to
// Main, as riverbus-bench and this package's tests do.
func Run(ctx context.Context, opts Opts, stdout io.Writer) (*Report, error) {
	o, selected, err := normalize(opts)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()

	rep := &Report{
		StartedAt: started.UTC(), Runs: o.Runs, Scale: o.Scale,
		Server: e.serverDesc, PostgresVersion: e.pgVersion,
		GoVersion: runtime.Version(), RiverVersion: benchkit.ModuleVersion("github.com/riverqueue/river"),
		NumCPU: runtime.NumCPU(), JSONPath: o.JSONPath,
	}
	var failed []string
	for _, s := range selected {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e.log.Info("bench: scenario starting", "scenario", s.name, "runs", o.Runs, "scale", o.Scale)
		t0 := time.Now()
		rows, err := s.run(ctx, e)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e.log.Error("bench: scenario failed", "scenario", s.name, "error", err)
			failed = append(failed, s.name)
			rows = append(rows, Result{Scenario: s.name, Metric: "-", Error: err.Error()})
		}
		for i := range rows {
			rows[i].evaluate()
		}
		e.log.Info("bench: scenario done", "scenario", s.name, "took", time.Since(t0).Round(time.Millisecond))
		rep.Results = append(rep.Results, rows...)
	}
	rep.DurationSeconds = math.Round(time.Since(started).Seconds()*10) / 10

	writeTable(stdout, rep)
	if err := benchkit.WriteJSON(o.JSONPath, rep); err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	fmt.Fprintf(stdout, "\nJSON report: %s\n", o.JSONPath)
	if len(failed) > 0 {
		return rep, fmt.Errorf("bench: scenario(s) failed: %s", strings.Join(failed, ", "))
	}
	return rep, nil
}

func normalize(opts Opts) (Opts, []scenario, error) {
	o := opts
	if o.Runs == 0 {
		o.Runs = RunsDefault
	}
	if o.Scale == 0 {
		o.Scale = ScaleDefault
	}
	if o.JSONPath == "" {
		o.JSONPath = JSONPathDefault
	}
	switch {
	case o.Runs < 1:
		return o, nil, fmt.Errorf("Runs must be at least 1, got %d", o.Runs)
	case o.Scale < 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0):
		return o, nil, fmt.Errorf("Scale must be positive, got %v", o.Scale)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Scenarios) == 0 {
		return o, slices.Clone(scenarios), nil
	}
	var selected []scenario
	for _, s := range scenarios {
		if slices.Contains(o.Scenarios, s.name) {
			selected = append(selected, s)
		}
	}
	for _, name := range o.Scenarios {
		if !slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == name }) {
			return o, nil, fmt.Errorf("Scenarios: unknown scenario %q; scenarios are %s", name, strings.Join(ScenarioNames(), ", "))
		}
	}
	return o, selected, nil
}

// evaluate fills Met from Target and the medians.
func (r *Result) evaluate() {
	if r.Target == nil {
		return
	}
	var f *Figure
	switch r.Target.Of {
	case "ratio":
		f = r.Ratio
	case "riverbus":
		f = r.Riverbus
	}
	if f == nil {
		return
	}
	met := f.Median <= r.Target.Value
	if r.Target.Op == ">=" {
		met = f.Median >= r.Target.Value
	}
	r.Met = &met
}
