package bench

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/riverbus/riverbus/internal/benchkit"
)

// pick is f of each sample: one figure of every run, for summarize and
// paired.
func pick[T any](s []T, f func(T) float64) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = f(x)
	}
	return out
}

// paired builds a row with a riverbus figure, a raw River figure and their
// per-run ratio.
func paired(scenario, metric, unit string, rb, raw []float64, target *Target, note string) Result {
	return Result{
		Scenario: scenario, Metric: metric, Unit: unit,
		Riverbus: benchkit.Summarize(rb), Baseline: benchkit.Summarize(raw), Ratio: benchkit.Summarize(benchkit.Ratios(rb, raw)),
		Target: target, Note: note,
	}
}

func writeTable(w io.Writer, rep *Report) {
	rep.WritePreamble(w, "riverbus-bench: ", "riverbus / raw River", "")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tRIVERBUS\tRAW RIVER\tRATIO\tTARGET\tMET")
	var notes benchkit.Notes
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
			rb = benchkit.FormatFigure(r.Riverbus, r.Unit)
			if r.Baseline != nil {
				raw = benchkit.FormatFigure(r.Baseline, r.Unit)
			}
			if r.Ratio != nil {
				ratio = benchkit.FormatFigure(r.Ratio, "ratio")
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
		notes.Add(r.Scenario, r.Note)
	}
	tw.Flush()
	notes.Write(w)
}

func formatTarget(t Target, unit string) string {
	op := map[string]string{">=": "≥", "<=": "≤"}[t.Op]
	if t.Of == "ratio" {
		return "ratio " + op + " " + benchkit.FormatNumber(t.Value, "ratio")
	}
	return op + " " + benchkit.FormatValue(t.Value, unit)
}
