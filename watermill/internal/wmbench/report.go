package wmbench

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

func writeTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "riverbus-watermill-bench: riverbus's Watermill adapter beside %s; %d run(s), scale %g, %s, Go %s, River %s, %d CPU(s), %.0fs\n",
		rep.Baseline, rep.Runs, rep.Scale, rep.Server, rep.GoVersion, cmpStr(rep.RiverVersion, "?"), rep.NumCPU, rep.DurationSeconds)
	if len(rep.LoadAverage) == 2 {
		fmt.Fprintf(w, "Load average (1 min) at the start %.2f, at the end %.2f: other work on the machine moves every figure.\n", rep.LoadAverage[0], rep.LoadAverage[1])
	}
	fmt.Fprintln(w, "Settings: "+rep.Settings)
	if rep.Runs > 1 {
		fmt.Fprintln(w, "Figures are medians over runs with the spread (min–max); ratio = riverbus / watermill-sql, per run; BETTER says which way of the figures and of the ratio is better.")
	} else {
		fmt.Fprintln(w, "One run per figure; ratio = riverbus / watermill-sql; BETTER says which way of the figures and of the ratio is better.")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tRIVERBUS\tWATERMILL-SQL\tRATIO\tBETTER")
	var notes []string
	for _, r := range rep.Results {
		rb, wm, ratio := "-", "-", "-"
		if r.Error != "" {
			rb, wm, ratio = "FAILED: "+oneLine(r.Error), "", ""
		} else {
			rb, wm = formatFigure(r.Riverbus, r.Unit), formatFigure(r.Baseline, r.Unit)
			ratio = formatFigure(r.Ratio, "ratio")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Metric, rb, wm, ratio, r.Better)
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
	if len(rep.TopStatements) > 0 {
		fmt.Fprintln(w, "\nWhere the database time goes (pg_stat_statements, first run): per phase and side, the statements that took the most time, how often each ran per message and its mean time.")
		for _, t := range rep.TopStatements {
			fmt.Fprintf(w, "  %s %s, %s:\n", t.Scenario, t.Phase, t.Side)
			for _, st := range t.Statements {
				fmt.Fprintf(w, "    %6.3f/msg  %7.3f ms  %s\n", st.CallsPerMessage, st.MsPerCall, st.Query)
			}
		}
	}
}

func formatFigure(f *Figure, unit string) string {
	if f == nil {
		return "-"
	}
	s := formatNumber(f.Median, unit)
	if unit != "" && unit != "ratio" {
		s += " " + unit
	}
	if len(f.Runs) > 1 {
		s += " (" + formatNumber(f.Min, unit) + "–" + formatNumber(f.Max, unit) + ")"
	}
	return s
}

func formatNumber(v float64, unit string) string {
	switch {
	case unit == "ratio":
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
