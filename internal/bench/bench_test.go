package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRunSmoke runs every scenario once at a tiny scale: it keeps the harness
// working, and asserts nothing about speed.
func TestRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("every scenario with its processes: not in -short")
	}
	// A guard against a hung scenario, not a speed check: a loaded 2-core
	// machine needs a few minutes for every scenario with its processes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "out", "results.json")
	var out bytes.Buffer
	rep, err := Run(ctx, Opts{DatabaseURL: pgtest.NewDatabase(t), Runs: 1, Scale: 0.001, JSONPath: path}, &out)
	require.NoError(t, err, out.String())
	t.Log("\n" + out.String())

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

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var decoded Report
	require.NoError(t, json.Unmarshal(b, &decoded))
	require.Equal(t, len(rep.Results), len(decoded.Results))
	require.Contains(t, out.String(), "JSON report: "+path)
	require.Contains(t, out.String(), "SCENARIO")
}

func TestOptsValidation(t *testing.T) {
	ctx := context.Background()
	_, err := Run(ctx, Opts{Scenarios: []string{"nope"}}, &bytes.Buffer{})
	require.ErrorContains(t, err, `unknown scenario "nope"`)
	_, err = Run(ctx, Opts{Runs: -1}, &bytes.Buffer{})
	require.ErrorContains(t, err, "Runs must be at least 1")
	_, err = Run(ctx, Opts{Scale: -2}, &bytes.Buffer{})
	require.ErrorContains(t, err, "Scale must be positive")
}

func TestSummaries(t *testing.T) {
	f := summarize([]float64{3, 1, 2})
	require.Equal(t, Figure{Median: 2, Min: 1, Max: 3, Runs: []float64{3, 1, 2}}, *f)
	require.Equal(t, 2.5, summarize([]float64{1, 2, 3, 4}).Median)
	require.Nil(t, summarize(nil))

	sorted := make([]float64, 100)
	for i := range sorted {
		sorted[i] = float64(i + 1)
	}
	require.Equal(t, 50.0, percentile(sorted, 50))
	require.Equal(t, 99.0, percentile(sorted, 99))
	require.Equal(t, 100.0, percentile(sorted, 100))

	r := paired("s", "m", "jobs/s", []float64{8, 9}, []float64{10, 10}, &Target{Of: "ratio", Op: ">=", Value: 0.8}, "")
	r.evaluate()
	require.InDelta(t, 0.85, r.Ratio.Median, 1e-9)
	require.True(t, *r.Met)

	require.Equal(t, "1M", count(1_000_000))
	require.Equal(t, "100k", count(100_000))
	require.Equal(t, "2.5k", count(2500))
	require.Equal(t, "150", count(150))
}
