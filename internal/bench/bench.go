package bench

import (
	"context"
	"io"
	"slices"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// Opts configures Run; its zero fields take defaults' values, and its
// Scenarios are among ScenarioNames.
type Opts = benchkit.Opts

var defaults = benchkit.Defaults{Runs: 3, JSONPath: "bench/results.json", DatabaseEnv: "$DATABASE_URL or $RIVERBUS_DATABASE_URL"}

// Report is what Run measured.
type Report struct {
	benchkit.Header
	// Results has one row per scenario and metric, in scenario order.
	Results []Result `json:"results"`
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
	return benchkit.Names(scenarios, func(s scenario) string { return s.name })
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
	e, names, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer e.Close()

	// A smoke run starts the longest first.
	parallel := &benchkit.Parallel{First: []string{"scale-out", "many-pools"}}
	rows, failed, err := benchkit.RunScenarios(ctx, e.Env, names, parallel, func(ctx context.Context, name string) ([]Result, error) {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
		rows, err := scenarios[i].run(ctx, e)
		for i := range rows {
			rows[i].evaluate()
		}
		return rows, err
	}, func(name string, err error) Result { return Result{Scenario: name, Metric: "-", Error: err.Error()} })
	if err != nil {
		return nil, err
	}
	rep := &Report{Header: e.Header(), Results: rows}
	return rep, e.Finish(&rep.Header, rep, stdout, func(w io.Writer) { writeTable(w, rep) }, failed)
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
