package wmbench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/riverbus/riverbus/internal/benchkit"
)

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
			rb, wm, ratio = "FAILED: "+benchkit.OneLine(r.Error), "", ""
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
	s := benchkit.FormatNumber(f.Median, unit)
	if unit != "" && unit != "ratio" {
		s += " " + unit
	}
	if len(f.Runs) > 1 {
		s += " (" + benchkit.FormatNumber(f.Min, unit) + "–" + benchkit.FormatNumber(f.Max, unit) + ")"
	}
	return s
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
