package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// summarize returns the median and spread of values, or nil for none.
func summarize(values []float64) *Figure {
	if len(values) == 0 {
		return nil
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return &Figure{Median: median, Min: s[0], Max: s[n-1], Runs: slices.Clone(values)}
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}

// ratios divides a[i] by b[i].
func ratios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

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
		Riverbus: summarize(rb), Baseline: summarize(raw), Ratio: summarize(ratios(rb, raw)),
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
			rb, raw = "FAILED: "+oneLine(r.Error), ""
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
		s += " (" + formatNumber(f.Min, unit) + "–" + formatNumber(f.Max, unit) + ")"
	}
	return s
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "ratio":
		return formatNumber(v, unit)
	case "x":
		return formatNumber(v, unit) + "×"
	}
	return formatNumber(v, unit) + " " + unit
}

func formatNumber(v float64, unit string) string {
	switch {
	case unit == "ratio" || unit == "x":
		return fmt.Sprintf("%.2f", v)
	case strings.HasSuffix(unit, "/s") && v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	case strings.HasSuffix(unit, "/s"):
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func formatTarget(t Target, unit string) string {
	op := map[string]string{">=": "≥", "<=": "≤"}[t.Op]
	if t.Of == "ratio" {
		return "ratio " + op + " " + formatNumber(t.Value, "ratio")
	}
	return op + " " + formatValue(t.Value, unit)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
