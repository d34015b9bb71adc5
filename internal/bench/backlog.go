package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/riverbus/riverbus/internal/bench/fanoutproc"
	"github.com/riverbus/riverbus/internal/benchkit"
)

var backlogSizes = []int{100_000, 1_000_000}

// backlogRuns is how many times each backlog size is measured, whatever
// Opts.Runs says: its target, peak RSS, moves a few percent between runs,
// and at full size one catch-up of 1M events takes minutes.
const backlogRuns = 1

// runBacklog: a fan-out process (fanoutproc) catching up on a backlog for one
// pool; its catch-up time and peak RSS, at two backlog sizes.
func runBacklog(ctx context.Context, e *env) ([]Result, error) {
	bin, err := benchkit.Executable()
	if err != nil {
		return []Result{{Scenario: "backlog", Metric: "-", Skipped: "cannot run fanoutproc: " + benchkit.OneLine(err.Error())}}, nil
	}
	sizes := make([]int, len(backlogSizes))
	for i, n := range backlogSizes {
		sizes[i] = e.Scaled(n, 100*(i+1))
	}
	secs := make([][]float64, len(sizes))
	rss := make([][]float64, len(sizes))
	for run := range min(e.Opts.Runs, backlogRuns) {
		for i, n := range sizes {
			r, err := backlogRun(ctx, e, bin, n)
			if err != nil {
				return nil, fmt.Errorf("run %d, %d events: %w", run+1, n, err)
			}
			e.Log.Info("bench: measured", "scenario", "backlog", "run", run+1, "events", n,
				"seconds", r.ElapsedSeconds, "peak_rss_mb", float64(r.PeakRSSBytes)/1e6)
			secs[i] = append(secs[i], r.ElapsedSeconds)
			rss[i] = append(rss[i], float64(r.PeakRSSBytes)/1e6)
		}
	}
	var rates []string
	var rows []Result
	for i, n := range sizes {
		rates = append(rates, fmt.Sprintf("%s: %.1fk events/s", count(n), float64(n)/benchkit.Summarize(secs[i]).Median/1000))
	}
	note := fmt.Sprintf("%d run(s) per size; one pool from the beginning; fanoutproc (the fan-out services, default fanout.Config) in a child process, peak RSS = its VmHWM; catch-up %s",
		min(e.Opts.Runs, backlogRuns), strings.Join(rates, ", "))
	for i, n := range sizes {
		rows = append(rows,
			Result{Scenario: "backlog", Metric: "catch-up, " + count(n) + " events", Unit: "s", Riverbus: benchkit.Summarize(secs[i]), Note: note},
			Result{Scenario: "backlog", Metric: "peak RSS, " + count(n) + " events", Unit: "MB", Riverbus: benchkit.Summarize(rss[i]),
				Target: &Target{Of: "riverbus", Op: "<=", Value: 100}, Note: note})
	}
	last := len(sizes) - 1
	rows = append(rows, Result{
		Scenario: "backlog", Metric: fmt.Sprintf("peak RSS %s vs %s (flat)", count(sizes[last]), count(sizes[0])), Unit: "x",
		Riverbus: benchkit.Summarize(benchkit.Ratios(rss[last], rss[0])), Target: &Target{Of: "riverbus", Op: "<=", Value: 1.25}, Note: note,
	})
	return rows, nil
}

func backlogRun(ctx context.Context, e *env, bin string, n int) (fanoutproc.Result, error) {
	d, db, release, err := e.open(ctx, schemaRiverbus, poolConns)
	if err != nil {
		return fanoutproc.Result{}, err
	}
	defer release()
	last, err := copyEvents(ctx, db, n, 0)
	if err != nil {
		return fanoutproc.Result{}, err
	}
	if _, err := createPools(ctx, db, 1); err != nil {
		return fanoutproc.Result{}, err
	}
	if err := d.Settle(ctx, db); err != nil {
		return fanoutproc.Result{}, err
	}

	lines, err := runChildren(ctx, 1, bin, d.URL, nil, nil,
		fanoutproc.Name, "--target", strconv.FormatInt(last, 10), "--timeout", phaseTimeout.String())
	if err != nil {
		return fanoutproc.Result{}, err
	}
	var r fanoutproc.Result
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		return fanoutproc.Result{}, fmt.Errorf("fanoutproc printed %q: %w", lines[0], err)
	}
	if err := expectJobs(ctx, db, n, ""); err != nil {
		return fanoutproc.Result{}, err
	}
	return r, nil
}

// count writes n as 100, 10k, 1M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e6), ".0") + "M"
	case n >= 1000 && n%100 == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/1e3), ".0") + "k"
	}
	return strconv.Itoa(n)
}
