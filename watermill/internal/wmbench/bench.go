package wmbench

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// Opts configures Run; its zero fields take defaults' values (one run
// per scenario and side), and its Scenarios are among ScenarioNames.
type Opts = benchkit.Opts

var defaults = benchkit.Defaults{Runs: 1, JSONPath: "bench/watermill.json", DatabaseEnv: "$DATABASE_URL"}

// Report is what Run measured. Its shape follows the core bench's
// (bench/results.json), with watermill-sql as the baseline.
type Report struct {
	benchkit.Header
	// Baseline names what the riverbus figures are compared with.
	Baseline            string `json:"baseline"`
	WatermillVersion    string `json:"watermill_version,omitempty"`
	WatermillSQLVersion string `json:"watermill_sql_version,omitempty"`
	// Settings says how each side was configured.
	Settings string `json:"settings"`
	// Results has one row per scenario and metric, in scenario order.
	Results []Result `json:"results"`
	// TopStatements are, for each measured phase and side, the statements
	// that took the most database time (pg_stat_statements; empty without
	// it): where each side's database time goes.
	TopStatements []TopStatements `json:"top_statements,omitempty"`
}

// Result is one row of the report: one metric of one scenario.
type Result struct {
	Scenario string `json:"scenario"`
	Metric   string `json:"metric"`
	// Unit of Riverbus and Baseline: "msg/s", "ms", "s" or "" (a count).
	Unit string `json:"unit"`
	// Better is "higher" or "lower": which way of the figures, and so of
	// the ratio, is better.
	Better string `json:"better"`
	// Riverbus is riverbus's figure; nil when the scenario failed.
	Riverbus *Figure `json:"riverbus,omitempty"`
	// Baseline is watermill-sql's figure in the same run.
	Baseline *Figure `json:"baseline,omitempty"`
	// Ratio is Riverbus/Baseline computed per run.
	Ratio *Figure `json:"ratio,omitempty"`
	// Error is why the scenario failed.
	Error string `json:"error,omitempty"`
	// Note adds context: sizes, achieved rates, settings.
	Note string `json:"note,omitempty"`
}

// Figure summarises one figure over runs.
type Figure = benchkit.Figure

// metric is one row a scenario reports: key in its samples, the row's
// name, unit and better direction.
type metric struct {
	key, name, unit, better string
}

// sample is what one measurement of one side gave: metric key → value. A
// metric the run could not measure (statements without
// pg_stat_statements) is absent.
type sample map[string]float64

// measurement measures one side (impl) once. note describes the run; the
// first run's is kept.
type measurement func(ctx context.Context, e *env, side impl) (s sample, note string, err error)

// scenario is one named benchmark: the rows it reports and how to measure
// one side once.
type scenario struct {
	name    string
	metrics []metric
	measure measurement
}

var scenarios = []scenario{
	{"publish-consume", publishConsumeMetrics, measurePublishConsume},
	{"latency-200", latencyMetrics, func(ctx context.Context, e *env, side impl) (sample, string, error) {
		return measureLatency(ctx, e, side, 200)
	}},
	{"latency-1000", latencyMetrics, func(ctx context.Context, e *env, side impl) (sample, string, error) {
		return measureLatency(ctx, e, side, 1000)
	}},
	{"catch-up", catchUpMetrics, measureCatchUp},
}

// ScenarioNames returns the names Opts.Scenarios accepts, in the order Run
// runs them.
func ScenarioNames() []string {
	return benchkit.Names(scenarios, func(s scenario) string { return s.name })
}

// Run measures the selected scenarios on both sides, prints a table of the
// results and the path of the JSON report to stdout, writes the JSON
// report, and returns the report. A scenario that fails is recorded with
// its error, the others still run, and Run then returns the report with an
// error naming the failed scenarios.
//
// The publish-consume and catch-up scenarios start their subscriber
// processes by re-executing this program (os.Executable) with the hidden
// subcommand SubscriberCommand first: the program must hand those
// arguments to Main, as riverbus-watermill-bench and this package's tests
// do.
func Run(ctx context.Context, opts Opts, stdout io.Writer) (*Report, error) {
	e, names, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer e.Close()

	// A smoke run starts the longest first.
	parallel := &benchkit.Parallel{First: []string{"publish-consume"}}
	rows, failed, err := benchkit.RunScenarios(ctx, e.Env, names, parallel, func(ctx context.Context, name string) ([]Result, error) {
		se := *e // its phases' statements go under its name
		se.scenario = name
		return runScenario(ctx, &se, scenarios[slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })])
	}, func(name string, err error) Result { return Result{Scenario: name, Metric: "-", Error: err.Error()} })
	if err != nil {
		return nil, err
	}
	// In the scenarios' order, whichever finished first.
	top := e.top.list
	slices.SortStableFunc(top, func(a, b TopStatements) int {
		return slices.Index(names, a.Scenario) - slices.Index(names, b.Scenario)
	})
	rep := &Report{
		Header:           e.Header(),
		Baseline:         "watermill-sql " + benchkit.Or(benchkit.ModuleVersion(watermillSQLModule), "v4"),
		WatermillVersion: benchkit.ModuleVersion("github.com/ThreeDotsLabs/watermill"), WatermillSQLVersion: benchkit.ModuleVersion(watermillSQLModule),
		Settings: settingsNote(), Results: rows, TopStatements: top,
	}
	return rep, e.Finish(&rep.Header, rep, stdout, func(w io.Writer) { writeTable(w, rep) }, failed)
}

// runScenario measures both sides Runs times, alternating which goes
// first (A/B, B/A, …), and builds the scenario's rows.
func runScenario(ctx context.Context, e *env, s scenario) ([]Result, error) {
	var rbs, wms []sample
	note := ""
	for run := range e.Opts.Runs {
		order := []impl{implRiverbus, implWatermillSQL}
		if run%2 == 1 {
			slices.Reverse(order)
		}
		for _, side := range order {
			smp, n, err := s.measure(ctx, e, side)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", run+1, side, err)
			}
			e.Log.Info("wmbench: measured", "scenario", s.name, "run", run+1, "side", side, "sample", fmt.Sprint(map[string]float64(smp)))
			if side == implRiverbus {
				rbs = append(rbs, smp)
			} else {
				wms = append(wms, smp)
			}
			if note == "" {
				note = n
			}
		}
	}
	var rows []Result
	for _, m := range s.metrics {
		rb, okRB := values(rbs, m.key)
		wm, okWM := values(wms, m.key)
		if !okRB && !okWM {
			continue // not measurable here (statements without pg_stat_statements)
		}
		r := Result{Scenario: s.name, Metric: m.name, Unit: m.unit, Better: m.better, Note: note}
		if okRB {
			r.Riverbus = benchkit.Summarize(rb)
		}
		if okWM {
			r.Baseline = benchkit.Summarize(wm)
		}
		if okRB && okWM {
			r.Ratio = benchkit.Summarize(benchkit.Ratios(rb, wm))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// values returns key's value in every sample, and whether every sample has
// it.
func values(samples []sample, key string) ([]float64, bool) {
	out := make([]float64, 0, len(samples))
	for _, s := range samples {
		v, ok := s[key]
		if !ok {
			return nil, false
		}
		out = append(out, v)
	}
	return out, len(out) > 0
}

const watermillSQLModule = "github.com/ThreeDotsLabs/watermill-sql/v4"
