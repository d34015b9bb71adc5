package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
	bin, err := executable()
	if err != nil {
		return []Result{{Scenario: "backlog", Metric: "-", Skipped: "cannot run fanoutproc: " + benchkit.OneLine(err.Error())}}, nil
	}
	sizes := make([]int, len(backlogSizes))
	for i, n := range backlogSizes {
		sizes[i] = e.scaled(n, 100*(i+1))
	}
	secs := make([][]float64, len(sizes))
	rss := make([][]float64, len(sizes))
	for run := range min(e.opts.Runs, backlogRuns) {
		for i, n := range sizes {
			r, err := backlogRun(ctx, e, bin, n)
			if err != nil {
				return nil, fmt.Errorf("run %d, %d events: %w", run+1, n, err)
			}
			e.log.Info("bench: measured", "scenario", "backlog", "run", run+1, "events", n,
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
		min(e.opts.Runs, backlogRuns), strings.Join(rates, ", "))
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
	d, err := e.newDatabase(ctx, schemaRiverbus)
	if err != nil {
		return fanoutproc.Result{}, err
	}
	defer d.drop()
	db, err := d.connect(ctx, poolConns)
	if err != nil {
		return fanoutproc.Result{}, err
	}
	defer db.Close()
	last, err := copyEvents(ctx, db, n, 0)
	if err != nil {
		return fanoutproc.Result{}, err
	}
	if _, err := createPools(ctx, db, 1); err != nil {
		return fanoutproc.Result{}, err
	}
	if err := d.settle(ctx, db); err != nil {
		return fanoutproc.Result{}, err
	}

	cmd := exec.CommandContext(ctx, bin, fanoutproc.Name, "--target", strconv.FormatInt(last, 10), "--timeout", phaseTimeout.String())
	cmd.Env = append(os.Environ(), "DATABASE_URL="+d.url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fanoutproc.Result{}, fmt.Errorf("fanoutproc: %w: %s", err, lastLine(stderr.String()))
	}
	var r fanoutproc.Result
	if err := json.Unmarshal([]byte(lastLine(stdout.String())), &r); err != nil {
		return fanoutproc.Result{}, fmt.Errorf("fanoutproc printed %q: %w", stdout.String(), err)
	}
	if err := expectJobs(ctx, db, n, ""); err != nil {
		return fanoutproc.Result{}, err
	}
	return r, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
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
