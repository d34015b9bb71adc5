package wmbench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/benchkit"
)

func TestMain(m *testing.M) {
	// The bench runs its subscriber processes by re-executing this
	// program, here the test binary, with the subcommand first: run it as
	// riverbus-watermill-bench would.
	benchkit.RunAsChild(Main, SubscriberCommand)
	os.Exit(m.Run())
}

// TestRunSmoke runs the whole bench once at a tiny scale, as a smoke run
// (--smoke), on a throwaway server of its own (pg_stat_statements loaded,
// as `make bench`'s): it keeps the harness working and checks that every
// row has a figure from both sides and their ratio. It asserts nothing
// about speed.
func TestRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server and runs every scenario on both sides with their subscriber processes")
	}
	t.Setenv("DATABASE_URL", "")
	// A guard against a hung scenario, not a speed check.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "out", "watermill.json")
	b, out, took, err := benchkit.SmokeRun(ctx, command, path, "--scale", "0.0001")
	require.NoError(t, err)
	t.Log("\n" + out)
	t.Log("\n" + took)

	var rep Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, 0.0001, rep.Scale)
	require.True(t, rep.Smoke)
	require.Contains(t, rep.Baseline, "watermill-sql v4")
	require.Contains(t, out, "SMOKE RUN")

	var metrics []string
	for _, s := range scenarios {
		for _, m := range s.metrics {
			metrics = append(metrics, s.name+": "+m.name)
		}
	}
	var got []string
	for _, r := range rep.Results {
		name := r.Scenario + ": " + r.Metric
		got = append(got, name)
		require.Empty(t, r.Error, name)
		require.Contains(t, []string{"higher", "lower"}, r.Better, name)
		for side, f := range map[string]*Figure{"riverbus": r.Riverbus, "watermill-sql": r.Baseline, "ratio": r.Ratio} {
			require.NotNil(t, f, "%s has no %s figure", name, side)
			require.Len(t, f.Runs, 1, name)
			require.Positive(t, f.Median, "%s, %s", name, side)
		}
	}
	// Every scenario's every metric, the statement rows included: the
	// throwaway server loads pg_stat_statements.
	require.ElementsMatch(t, metrics, got)
	sides := map[string]int{}
	for _, top := range rep.TopStatements {
		require.NotEmpty(t, top.Statements, "%s %s %s", top.Scenario, top.Phase, top.Side)
		sides[top.Side]++
	}
	require.Equal(t, sides["riverbus"], sides["watermill-sql"], "the phases whose statements are shown, by side: %v", sides)
	require.Positive(t, sides["riverbus"])
}
