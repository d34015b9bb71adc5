package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/bench/fanoutproc"
	"github.com/riverbus/riverbus/internal/bench/workerproc"
	"github.com/riverbus/riverbus/internal/benchkit"
	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestMain(m *testing.M) {
	// The backlog and scale-out scenarios run their child processes by
	// re-executing this program, here the test binary, with the child's
	// subcommand first: run it as riverbus-bench would.
	benchkit.RunAsChild(Main, fanoutproc.Name, workerproc.Name)
	pgtest.Main(m)
}

// TestRunSmoke runs the riverbus-bench command with every scenario once at a
// tiny scale, as a smoke run (--smoke): it keeps the harness working,
// checks every row, and asserts nothing about speed.
func TestRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario and its child processes")
	}
	// A guard against a hung scenario, not a speed check: a loaded 2-core
	// machine needs a few minutes for every scenario with its processes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "out", "results.json")
	b, out, took, err := benchkit.SmokeRun(ctx, command, path, "--database-url", pgtest.NewDatabase(t), "--runs", "1", "--scale", "0.0001")
	require.NoError(t, err)
	t.Log("\n" + out)
	t.Log("\n" + took)

	var rep Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 1, rep.Runs)
	require.Equal(t, 0.0001, rep.Scale)
	require.True(t, rep.Smoke)

	for _, name := range ScenarioNames() {
		var rows []Result
		for _, r := range rep.Results {
			if r.Scenario == name {
				rows = append(rows, r)
			}
		}
		require.NotEmpty(t, rows, "scenario %s has no result", name)
		for _, r := range rows {
			require.Empty(t, r.Error, "%s %s", name, r.Metric)
			require.Empty(t, r.Skipped, "%s %s", name, r.Metric)
			require.NotNil(t, r.Riverbus, "%s %s", name, r.Metric)
			require.Len(t, r.Riverbus.Runs, 1)
			require.Positive(t, r.Riverbus.Median, "%s %s", name, r.Metric)
			if r.Baseline != nil {
				require.NotNil(t, r.Ratio, "%s %s", name, r.Metric)
			}
			if r.Target != nil {
				require.NotNil(t, r.Met, "%s %s", name, r.Metric)
			}
		}
	}
	for _, name := range []string{"fanout-1pool", "fanout-4pools", "drain", "latency-200", "latency-200-loaded", "latency-1000"} {
		for _, r := range rep.Results {
			// The latency scenarios' horizon and batch hops have no raw
			// River equivalent.
			riverbusOnly := strings.HasPrefix(r.Metric, "hop: commit → round") || strings.HasPrefix(r.Metric, "hop: commit → batch")
			if r.Scenario == name && !riverbusOnly {
				require.NotNil(t, r.Baseline, "%s %s has no raw River baseline", name, r.Metric)
			}
		}
	}

	// scale-out: a row per process count, each count above one beside the
	// one-process figure of the same run.
	var scaleOut []string
	for _, r := range rep.Results {
		if r.Scenario == "scale-out" {
			scaleOut = append(scaleOut, r.Metric)
			require.Equal(t, strings.Contains(r.Metric, "processes"), r.Baseline != nil, r.Metric)
		}
	}
	require.Equal(t, []string{
		"fan-out, 1 process", "fan-out, 2 processes", "fan-out, 4 processes",
		"workers, 1 process", "workers, 4 processes", "workers, 8 processes",
	}, scaleOut)

	require.Contains(t, out, "JSON report: "+path)
	require.Contains(t, out, "SCENARIO")
	require.Contains(t, out, "SMOKE RUN")
}

func TestCommandUsage(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, _ := run("--help")
	require.Equal(t, 0, code)
	for _, flag := range []string{"--runs", "--scale", "--scenario", "--json", "--cpuprofile", "--database-url", "--log-level", "--log-format"} {
		require.Contains(t, out, flag)
	}
	require.Contains(t, out, "Scenarios: fanout-1pool,")
	require.NotContains(t, out, fanoutproc.Name, "the child processes are hidden")
	require.NotContains(t, out, workerproc.Name, "the child processes are hidden")
	require.NotContains(t, out, "--smoke", "the smoke tests' flag is hidden")

	code, _, errOut := run("extra")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown command "extra"`)
	require.Contains(t, errOut, "Usage:")

	code, _, errOut = run("--runs", "many")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `"--runs"`)

	code, _, errOut = run("--scenario", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `riverbus-bench: scenarios (--scenario): unknown scenario "nope"; scenarios are fanout-1pool,`)
	require.Contains(t, errOut, "Usage:")

	code, _, errOut = run("--scale", "-1")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "scale (--scale) must be a positive number, got -1")
}

func TestOptsValidation(t *testing.T) {
	ctx := context.Background()
	_, err := Run(ctx, Opts{Scenarios: []string{"nope"}}, &bytes.Buffer{})
	require.ErrorContains(t, err, `unknown scenario "nope"`)
	_, err = Run(ctx, Opts{Runs: -1}, &bytes.Buffer{})
	require.ErrorContains(t, err, "runs (--runs) must be at least 1")
	_, err = Run(ctx, Opts{Scale: -2}, &bytes.Buffer{})
	require.ErrorContains(t, err, "scale (--scale) must be a positive number")
}

func TestSummaries(t *testing.T) {
	f := benchkit.Summarize([]float64{3, 1, 2})
	require.Equal(t, Figure{Median: 2, Min: 1, Max: 3, Runs: []float64{3, 1, 2}}, *f)
	require.Equal(t, 2.5, benchkit.Summarize([]float64{1, 2, 3, 4}).Median)
	require.Nil(t, benchkit.Summarize(nil))

	sorted := make([]float64, 100)
	for i := range sorted {
		sorted[i] = float64(i + 1)
	}
	require.Equal(t, 50.0, benchkit.Percentile(sorted, 50))
	require.Equal(t, 99.0, benchkit.Percentile(sorted, 99))
	require.Equal(t, 100.0, benchkit.Percentile(sorted, 100))

	r := paired("s", "m", "jobs/s", []float64{8, 9}, []float64{10, 10}, &Target{Of: "ratio", Op: ">=", Value: 0.8}, "")
	r.evaluate()
	require.InDelta(t, 0.85, r.Ratio.Median, 1e-9)
	require.True(t, *r.Met)

	require.Equal(t, "1M", count(1_000_000))
	require.Equal(t, "100k", count(100_000))
	require.Equal(t, "2.5k", count(2500))
	require.Equal(t, "150", count(150))
}
