package benchkit

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Header is what a bench's report starts with: how and on what it ran.
type Header struct {
	StartedAt       time.Time `json:"started_at"`
	DurationSeconds float64   `json:"duration_seconds"`
	Runs            int       `json:"runs"`
	Scale           float64   `json:"scale"`
	// Smoke: a smoke run (Opts.Smoke), whose figures mean nothing.
	Smoke bool `json:"smoke,omitempty"`
	// Server describes the PostgreSQL server and its durability settings.
	Server          string `json:"server"`
	PostgresVersion string `json:"postgres_version"`
	GoVersion       string `json:"go_version"`
	RiverVersion    string `json:"river_version,omitempty"`
	NumCPU          int    `json:"num_cpu"`
	// LoadAverage is the machine's 1-minute load average when the run
	// started and when it ended (nil where /proc/loadavg is not there):
	// other work on the machine moves every figure.
	LoadAverage []float64 `json:"load_average,omitempty"`
	// JSONPath is where the report was written.
	JSONPath string `json:"-"`
}

// Header returns the header of the run's report; Finish completes it.
func (e *Env) Header() Header {
	return Header{
		StartedAt: e.started.UTC(), Runs: e.Opts.Runs, Scale: e.Opts.Scale, Smoke: e.Opts.Smoke,
		Server: e.serverDesc, PostgresVersion: e.pgVersion,
		GoVersion: runtime.Version(), RiverVersion: ModuleVersion("github.com/riverqueue/river"),
		NumCPU: runtime.NumCPU(), JSONPath: e.Opts.JSONPath,
	}
}

// smokeParallel is how many scenarios a smoke run (Opts.Smoke) runs at
// once, when the bench allows it: most of a scenario's time goes in waits,
// polls and sessions being set up, which another scenario's work can fill.
const smokeParallel = 2

// Parallel says that a bench's scenarios may run at once in a smoke run,
// those of First started first: the longest, so that they do not run
// alone at the end.
type Parallel struct{ First []string }

// RunScenarios measures the scenarios names (run), one after the other, or
// in a smoke run, when parallel is not nil, up to smokeParallel at once,
// logging when each starts and ends, and returns their rows in the order
// of names. A scenario that fails adds the row failed makes of its error,
// and its name to the failed ones; the others still run. It stops when ctx
// ends.
func RunScenarios[R any](ctx context.Context, e *Env, names []string, parallel *Parallel, run func(ctx context.Context, name string) ([]R, error), failed func(name string, err error) R) (rows []R, failedNames []string, err error) {
	type outcome struct {
		rows []R
		err  error
	}
	conc, order := 1, make([]int, 0, len(names))
	if parallel != nil && e.Opts.Smoke {
		conc = smokeParallel
		for i, name := range names {
			if slices.Contains(parallel.First, name) {
				order = append(order, i)
			}
		}
	}
	for i := range names {
		if !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	outcomes := make([]outcome, len(names))
	next := make(chan int)
	wait := Work(conc, next, func(i int) error {
		e.Log.Info(e.name+": scenario starting", "scenario", names[i], "runs", e.Opts.Runs, "scale", e.Opts.Scale)
		t0 := time.Now()
		rs, err := run(ctx, names[i])
		if err != nil && ctx.Err() == nil {
			e.Log.Error(e.name+": scenario failed", "scenario", names[i], "error", err)
		}
		e.Log.Info(e.name+": scenario done", "scenario", names[i], "took", time.Since(t0).Round(time.Millisecond))
		outcomes[i] = outcome{rs, err}
		return nil
	})
	for _, i := range order {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	_ = wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for i, name := range names {
		o := outcomes[i]
		if o.err != nil {
			failedNames = append(failedNames, name)
			o.rows = append(o.rows, failed(name, o.err))
		}
		rows = append(rows, o.rows...)
	}
	return rows, failedNames, nil
}

// Finish ends a run: it completes h, rep's header (the duration, the load
// average at the end), prints the table (table) and where the JSON report
// goes to stdout, writes rep as JSON, and returns an error naming the
// failed scenarios, if any.
func (e *Env) Finish(h *Header, rep any, stdout io.Writer, table func(io.Writer), failed []string) error {
	h.DurationSeconds = math.Round(time.Since(e.started).Seconds()*10) / 10
	if load1 := LoadAverage(); e.load0 >= 0 && load1 >= 0 {
		h.LoadAverage = []float64{e.load0, load1}
	}
	table(stdout)
	if err := WriteJSON(h.JSONPath, rep); err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	fmt.Fprintf(stdout, "\nJSON report: %s\n", h.JSONPath)
	if len(failed) > 0 {
		return fmt.Errorf("%s: scenario(s) failed: %s", e.name, strings.Join(failed, ", "))
	}
	return nil
}

// WritePreamble prints the lines above a report's table: title followed
// by how and on what the run ran, the load average, whether it was a
// smoke run, and how to read the figures, whose ratio is ratio (riverbus
// / the baseline) and whose further reading is more ("" for none).
func (h *Header) WritePreamble(w io.Writer, title, ratio, more string) {
	fmt.Fprintf(w, "%s%d run(s), scale %g, %s, Go %s, River %s, %d CPU(s), %.0fs\n",
		title, h.Runs, h.Scale, h.Server, h.GoVersion, Or(h.RiverVersion, "?"), h.NumCPU, h.DurationSeconds)
	if len(h.LoadAverage) == 2 {
		fmt.Fprintf(w, "Load average (1 min) at the start %.2f, at the end %.2f: other work on the machine moves every figure.\n", h.LoadAverage[0], h.LoadAverage[1])
	}
	if h.Smoke {
		fmt.Fprintln(w, "SMOKE RUN: every scenario at its least cost, to check that the bench runs; the figures mean nothing.")
	}
	if h.Runs > 1 {
		fmt.Fprintf(w, "Figures are medians over runs with the spread (min–max); ratio = %s, per run%s.\n", ratio, more)
	} else {
		fmt.Fprintf(w, "One run per figure; ratio = %s%s.\n", ratio, more)
	}
}

// Notes are the notes of a table's rows, each once, to print below it.
type Notes []string

// Add adds scenario's note, unless it is empty or there already.
func (n *Notes) Add(scenario, note string) {
	if s := scenario + ": " + note; note != "" && !slices.Contains(*n, s) {
		*n = append(*n, s)
	}
}

// Write prints the notes, after an empty line.
func (n Notes) Write(w io.Writer) {
	if len(n) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, s := range n {
		fmt.Fprintln(w, "  "+s)
	}
}

// FormatValue prints v in unit for a table (FormatNumber): a ratio and a
// count ("") bare, a factor ("x") as 1.25×, any other unit after the
// number.
func FormatValue(v float64, unit string) string {
	switch unit {
	case "ratio", "":
		return FormatNumber(v, unit)
	case "x":
		return FormatNumber(v, unit) + "×"
	}
	return FormatNumber(v, unit) + " " + unit
}

// FormatFigure prints f's median in unit (FormatValue) and, over several
// runs, its spread; "-" for none.
func FormatFigure(f *Figure, unit string) string {
	if f == nil {
		return "-"
	}
	s := FormatValue(f.Median, unit)
	if len(f.Runs) > 1 {
		s += " (" + FormatNumber(f.Min, unit) + "–" + FormatNumber(f.Max, unit) + ")"
	}
	return s
}

// Or returns a, or b when a is empty.
func Or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
