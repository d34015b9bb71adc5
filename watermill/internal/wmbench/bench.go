package wmbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// Defaults of Opts fields.
const (
	RunsDefault     = 1
	ScaleDefault    = 1.0
	JSONPathDefault = "bench/watermill.json"
)

// Opts configures Run. Zero fields take their defaults.
type Opts struct {
	// DatabaseURL is a PostgreSQL server to measure on; its user must be
	// allowed to create databases. Every measurement gets a database of its
	// own, dropped afterwards. Empty: start a throwaway server (fsync and
	// synchronous_commit on) and stop it at the end.
	DatabaseURL string
	// Runs is how many times each scenario is measured on each side.
	// Zero: RunsDefault.
	Runs int
	// Scale multiplies every size and duration: 1 is the full benchmark,
	// the smoke test uses 0.01. Sizes never go below a small minimum.
	// Zero: ScaleDefault.
	Scale float64
	// Scenarios selects scenarios by name (see ScenarioNames). Empty: all.
	Scenarios []string
	// JSONPath is where the report is written as JSON; its directory is
	// created. Zero: JSONPathDefault.
	JSONPath string
	// Logger receives progress, and warnings from River, the fan-out and
	// watermill-sql. Nil: nothing is logged.
	Logger *slog.Logger
}

// Report is what Run measured. Its shape follows the core bench's
// (bench/results.json), with watermill-sql as the baseline.
type Report struct {
	StartedAt       time.Time `json:"started_at"`
	DurationSeconds float64   `json:"duration_seconds"`
	Runs            int       `json:"runs"`
	Scale           float64   `json:"scale"`
	// Baseline names what the riverbus figures are compared with.
	Baseline string `json:"baseline"`
	// Server describes the PostgreSQL server and its durability settings.
	Server              string `json:"server"`
	PostgresVersion     string `json:"postgres_version"`
	GoVersion           string `json:"go_version"`
	RiverVersion        string `json:"river_version,omitempty"`
	WatermillVersion    string `json:"watermill_version,omitempty"`
	WatermillSQLVersion string `json:"watermill_sql_version,omitempty"`
	NumCPU              int    `json:"num_cpu"`
	// LoadAverage is the machine's 1-minute load average when the run
	// started and when it ended (nil where /proc/loadavg is not there):
	// other work on the machine moves every figure.
	LoadAverage []float64 `json:"load_average,omitempty"`
	// Settings says how each side was configured.
	Settings string `json:"settings"`
	// Results has one row per scenario and metric, in scenario order.
	Results []Result `json:"results"`
	// TopStatements are, for each measured phase and side, the statements
	// that took the most database time (pg_stat_statements; empty without
	// it): where each side's database time goes.
	TopStatements []TopStatements `json:"top_statements,omitempty"`
	// JSONPath is where the report was written.
	JSONPath string `json:"-"`
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
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return names
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
	o, selected, err := normalize(opts)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	load0, haveLoad := loadAverage()
	e, err := newEnv(ctx, o)
	if err != nil {
		return nil, err
	}
	defer e.close()

	rep := &Report{
		StartedAt: started.UTC(), Runs: o.Runs, Scale: o.Scale,
		Baseline: "watermill-sql " + cmpStr(benchkit.ModuleVersion(watermillSQLModule), "v4"),
		Server:   e.serverDesc, PostgresVersion: e.pgVersion,
		GoVersion: runtime.Version(), RiverVersion: benchkit.ModuleVersion("github.com/riverqueue/river"),
		WatermillVersion: benchkit.ModuleVersion("github.com/ThreeDotsLabs/watermill"), WatermillSQLVersion: benchkit.ModuleVersion(watermillSQLModule),
		NumCPU: runtime.NumCPU(), Settings: settingsNote(), JSONPath: o.JSONPath,
	}
	var failed []string
	for _, s := range selected {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e.log.Info("wmbench: scenario starting", "scenario", s.name, "runs", o.Runs, "scale", o.Scale)
		t0 := time.Now()
		e.scenario = s.name
		rows, err := runScenario(ctx, e, s)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e.log.Error("wmbench: scenario failed", "scenario", s.name, "error", err)
			failed = append(failed, s.name)
			rows = append(rows, Result{Scenario: s.name, Metric: "-", Error: err.Error()})
		}
		e.log.Info("wmbench: scenario done", "scenario", s.name, "took", time.Since(t0).Round(time.Millisecond))
		rep.Results = append(rep.Results, rows...)
	}
	rep.DurationSeconds = math.Round(time.Since(started).Seconds()*10) / 10
	rep.TopStatements = e.top
	if load1, ok := loadAverage(); ok && haveLoad {
		rep.LoadAverage = []float64{load0, load1}
	}

	writeTable(stdout, rep)
	if err := benchkit.WriteJSON(o.JSONPath, rep); err != nil {
		return rep, fmt.Errorf("wmbench: %w", err)
	}
	fmt.Fprintf(stdout, "\nJSON report: %s\n", o.JSONPath)
	if len(failed) > 0 {
		return rep, fmt.Errorf("wmbench: scenario(s) failed: %s", strings.Join(failed, ", "))
	}
	return rep, nil
}

// runScenario measures both sides Runs times, alternating which goes
// first (A/B, B/A, …), and builds the scenario's rows.
func runScenario(ctx context.Context, e *env, s scenario) ([]Result, error) {
	var rbs, wms []sample
	note := ""
	for run := range e.opts.Runs {
		order := []impl{implRiverbus, implWatermillSQL}
		if run%2 == 1 {
			slices.Reverse(order)
		}
		for _, side := range order {
			smp, n, err := s.measure(ctx, e, side)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", run+1, side, err)
			}
			e.log.Info("wmbench: measured", "scenario", s.name, "run", run+1, "side", side, "sample", fmt.Sprint(map[string]float64(smp)))
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
		return o, nil, fmt.Errorf("--runs must be at least 1, got %d", o.Runs)
	case o.Scale < 0 || math.IsNaN(o.Scale) || math.IsInf(o.Scale, 0):
		return o, nil, fmt.Errorf("--scale must be a positive number, got %v", o.Scale)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Scenarios) == 0 {
		return o, slices.Clone(scenarios), nil
	}
	for _, name := range o.Scenarios {
		if !slices.Contains(ScenarioNames(), name) {
			return o, nil, fmt.Errorf("--scenario: unknown scenario %q; scenarios are %s", name, strings.Join(ScenarioNames(), ", "))
		}
	}
	var selected []scenario
	for _, s := range scenarios {
		if slices.Contains(o.Scenarios, s.name) {
			selected = append(selected, s)
		}
	}
	return o, selected, nil
}

const watermillSQLModule = "github.com/ThreeDotsLabs/watermill-sql/v4"

// loadAverage returns the machine's 1-minute load average, where Linux
// tells it.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return 0, false
	}
	return l, true
}
