package benchkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// testChild is the subcommand under which this test binary, re-executed,
// is a child process of TestChildren.
const testChild = "testchild"

func TestMain(m *testing.M) {
	RunAsChild(func(args []string, stdout, stderr io.Writer) int {
		return runTestChild(args[1], os.Stdin, stdout, stderr)
	}, testChild)
	os.Exit(m.Run())
}

// runTestChild behaves as a child process does (ok), or fails before it is
// ready (fail), or prints something else first (chatty).
func runTestChild(how string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch how {
	case "fail":
		fmt.Fprintln(stderr, "some detail\nno database here")
		return 1
	case "chatty":
		fmt.Fprintln(stdout, "hello")
		return 0
	}
	lines := bufio.NewReader(stdin)
	if err := AwaitGo(lines, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintln(stdout, "acked 1")
	fmt.Fprintln(stdout, "acked 2")
	<-StdinClosed(lines)
	fmt.Fprintln(stdout, `{"done":true}`)
	return 0
}

// The start protocol of the benches' child processes: ready, go, lines as
// they come, stop when stdin closes, the result last; and a child that
// fails or does not say ready is an error that says why.
func TestChildren(t *testing.T) {
	ctx := context.Background()
	bin, err := Executable()
	require.NoError(t, err)

	var (
		mu   sync.Mutex
		seen = map[int][]string{}
	)
	cs, err := StartChildren(ctx, 2, bin, "postgres://unused", []string{testChild, "ok"}, func(i int, line string) {
		mu.Lock()
		defer mu.Unlock()
		seen[i] = append(seen[i], line)
	})
	require.NoError(t, err)
	defer KillChildren(cs)
	require.Equal(t, testChild, cs[0].Name())
	require.NoError(t, GoChildren(cs))
	lasts, err := FinishChildren(cs)
	require.NoError(t, err)
	require.Equal(t, []string{`{"done":true}`, `{"done":true}`}, lasts)
	for i := range cs {
		require.NoError(t, cs[i].Err())
		require.Equal(t, []string{"acked 1", "acked 2", `{"done":true}`}, seen[i], "child %d", i)
	}

	_, err = StartChildren(ctx, 1, bin, "postgres://unused", []string{testChild, "fail"}, nil)
	require.ErrorContains(t, err, "child 1 of 1: testchild: exit status 1: no database here")

	_, err = StartChildren(ctx, 1, bin, "postgres://unused", []string{testChild, "chatty"}, nil)
	require.ErrorContains(t, err, `testchild printed "hello" instead of ready`)
}

func TestNormalize(t *testing.T) {
	d := Defaults{Runs: 3, JSONPath: "bench/x.json"}
	names := []string{"a", "b", "c"}
	o, selected, err := Opts{}.Normalize(d, names)
	require.NoError(t, err)
	require.Equal(t, 3, o.Runs)
	require.Equal(t, 1.0, o.Scale)
	require.Equal(t, "bench/x.json", o.JSONPath)
	require.NotNil(t, o.Logger)
	require.Equal(t, names, selected)

	// The bench's order, whatever the order asked.
	_, selected, err = Opts{Scenarios: []string{"c", "a"}}.Normalize(d, names)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, selected)

	_, _, err = Opts{Scenarios: []string{"a", "nope"}}.Normalize(d, names)
	require.EqualError(t, err, `scenarios (--scenario): unknown scenario "nope"; scenarios are a, b, c`)
	_, _, err = Opts{Runs: -1}.Normalize(d, names)
	require.EqualError(t, err, "runs (--runs) must be at least 1, got -1")
	for _, scale := range []float64{-0.5, math.NaN(), math.Inf(1)} {
		_, _, err = Opts{Scale: scale}.Normalize(d, names)
		require.ErrorContains(t, err, "scale (--scale) must be a positive number", "%v", scale)
	}
}

func TestWork(t *testing.T) {
	items := make(chan int)
	var (
		mu   sync.Mutex
		done []int
	)
	wait := Work(3, items, func(i int) error {
		mu.Lock()
		done = append(done, i)
		mu.Unlock()
		if i == 5 {
			return errors.New("five")
		}
		return nil
	})
	for i := range 10 {
		items <- i
	}
	close(items)
	require.EqualError(t, wait(), "five")
	require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, done, "an error stops nothing")
}

func TestFormat(t *testing.T) {
	require.Equal(t, "1.25×", FormatValue(1.25, "x"))
	require.Equal(t, "0.80", FormatValue(0.8, "ratio"))
	require.Equal(t, "16.3", FormatValue(16.3, ""))
	require.Equal(t, "1.5k jobs/s", FormatValue(1500, "jobs/s"))
	require.Equal(t, "-", FormatFigure(nil, "ms"))
	require.Equal(t, "2.00 ms", FormatFigure(Summarize([]float64{2}), "ms"))
	require.Equal(t, "2.00 ms (1.00–3.00)", FormatFigure(Summarize([]float64{3, 1, 2}), "ms"))

	var notes Notes
	notes.Add("a", "one")
	notes.Add("a", "one")
	notes.Add("b", "")
	notes.Add("b", "two")
	var b strings.Builder
	notes.Write(&b)
	require.Equal(t, "\n  a: one\n  b: two\n", b.String())

	require.Equal(t, []string{"a", "b"}, SplitList(" a,, b ,"))
	require.Equal(t, `bad \x1b[31m`, Printable("bad \x1b[31m"))
	require.Equal(t, "fine: é", Printable("fine: é"))
	require.Equal(t, "last", LastLine("first\nlast\n\n"))
}

// A smoke run's scenarios run two at a time where the bench allows it,
// the longest first, others one after the other; the rows keep the
// scenarios' order either way, and a failed scenario adds its row and its
// name.
func TestRunScenarios(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		smoke    bool
		parallel *Parallel
		most     int
		first    string
	}{{false, &Parallel{First: []string{"d"}}, 1, "a"}, {true, nil, 1, "a"}, {true, &Parallel{First: []string{"d"}}, 2, "d"}} {
		e := &Env{Opts: Opts{Smoke: tc.smoke}, Log: slog.New(slog.DiscardHandler), name: "test"}
		var order []string
		var (
			mu              sync.Mutex
			running, most   int
			release         = make(chan struct{})
			started, closed = 0, false
		)
		rows, failed, err := RunScenarios(context.Background(), e, names, tc.parallel, func(_ context.Context, name string) ([]string, error) {
			mu.Lock()
			order = append(order, name)
			running++
			started++
			most = max(most, running)
			// Hold the first scenario until a second has started, or
			// long enough for one to start if it may.
			if started == 2 && !closed {
				closed = true
				close(release)
			}
			mu.Unlock()
			select {
			case <-release:
			case <-time.After(100 * time.Millisecond):
			}
			mu.Lock()
			running--
			mu.Unlock()
			if name == "c" {
				return []string{"c1"}, errors.New("no c")
			}
			return []string{name + "1", name + "2"}, nil
		}, func(name string, err error) string { return name + ": " + err.Error() })
		require.NoError(t, err)
		require.Equal(t, []string{"a1", "a2", "b1", "b2", "c1", "c: no c", "d1", "d2", "e1", "e2"}, rows)
		require.Equal(t, []string{"c"}, failed)
		require.Equal(t, tc.most, most, "smoke %v, parallel %v", tc.smoke, tc.parallel)
		require.Equal(t, tc.first, order[0], "the scenario started first")
	}
}

// A failed smoke run's error names what failed before the table and the
// progress lines, which a CI log may cut from the middle of a long failure.
func TestSmokeRunLeadsWithWhatFailed(t *testing.T) {
	command := func(stdout, stderr io.Writer) *cobra.Command {
		c := &cobra.Command{Use: "bench", SilenceErrors: true, SilenceUsage: true, RunE: func(*cobra.Command, []string) error {
			log := slog.New(slog.NewTextHandler(stderr, nil))
			fmt.Fprintln(stdout, strings.Repeat("a table row\n", 100))
			log.Info("bench: scenario done", "scenario", "a")
			log.Error("bench: scenario failed", "scenario", "b", "error", "pools not caught up")
			return errors.New("bench: scenario(s) failed: b")
		}}
		c.Flags().Bool("smoke", false, "")
		c.Flags().String("json", "", "")
		return c
	}
	_, _, _, err := SmokeRun(context.Background(), command, t.TempDir()+"/r.json")
	require.Error(t, err)
	head, _, ok := strings.Cut(err.Error(), "stdout:")
	require.True(t, ok, err.Error())
	require.Contains(t, head, `error="pools not caught up"`)
	require.Contains(t, head, "scenario(s) failed: b")
	require.NotContains(t, head, "scenario done")
	require.NotContains(t, head, "a table row")
}
