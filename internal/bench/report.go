package bench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// paired builds a row with a riverbus figure, a raw River figure and their
// per-run ratio.
// pick is f of each sample: one figure of every run, for summarize and
// paired.
func pick[T any](s []T, f func(T) float64) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = f(x)
	}
	return out
}

func paired(scenario, metric, unit string, rb, raw []float64, target *Target, note string) Result {
	return Result{
		Scenario: scenario, Metric: metric, Unit: unit,
		Riverbus: benchkit.Summarize(rb), Baseline: benchkit.Summarize(raw), Ratio: benchkit.Summarize(benchkit.Ratios(rb, raw)),
		Target: target, Note: note,
	}
}

func writeTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "riverbus-bench: %d run(s), scale %g, %s, Go %s, River %s, %d CPU(s), %.0fs\n",
		rep.Runs, rep.Scale, rep.Server, rep.GoVersion, cmpStr(rep.RiverVersion, "?"), rep.NumCPU, rep.DurationSeconds)
	if rep.Runs > 1 {
		fmt.Fprintln(w, "Figures are medians over runs with the spread (min–max); ratio = riverbus / raw River, per run.")
	} else {
		fmt.Fprintln(w, "One run per figure; ratio = riverbus / raw River.")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tRIVERBUS\tRAW RIVER\tRATIO\tTARGET\tMET")
	var notes []string
	for _, r := range rep.Results {
		rb, raw, ratio, target, met := "-", "n/a", "n/a", "", ""
		switch {
		case r.Error != "":
			rb, raw = "FAILED: "+benchkit.OneLine(r.Error), ""
			ratio = ""
		case r.Skipped != "":
			rb, raw = "skipped: "+r.Skipped, ""
			ratio = ""
		default:
			rb = formatFigure(r.Riverbus, r.Unit)
			if r.Baseline != nil {
				raw = formatFigure(r.Baseline, r.Unit)
			}
			if r.Ratio != nil {
				ratio = formatFigure(r.Ratio, "ratio")
			}
		}
		if r.Target != nil {
			target = formatTarget(*r.Target, r.Unit)
		}
		if r.Met != nil {
			met = "yes"
			if !*r.Met {
				met = "NO"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Metric, rb, raw, ratio, target, met)
		if r.Note != "" && !slices.Contains(notes, r.Scenario+": "+r.Note) {
			notes = append(notes, r.Scenario+": "+r.Note)
		}
	}
	tw.Flush()
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
}

func formatFigure(f *Figure, unit string) string {
	if f == nil {
		return "-"
	}
	s := formatValue(f.Median, unit)
	if len(f.Runs) > 1 {
		s += " (" + benchkit.FormatNumber(f.Min, unit) + "–" + benchkit.FormatNumber(f.Max, unit) + ")"
	}
	return s
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "ratio":
		return benchkit.FormatNumber(v, unit)
	case "x":
		return benchkit.FormatNumber(v, unit) + "×"
	}
	return benchkit.FormatNumber(v, unit) + " " + unit
}

func formatTarget(t Target, unit string) string {
	op := map[string]string{">=": "≥", "<=": "≤"}[t.Op]
	if t.Of == "ratio" {
		return "ratio " + op + " " + benchkit.FormatNumber(t.Value, "ratio")
	}
	return op + " " + formatValue(t.Value, unit)
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
