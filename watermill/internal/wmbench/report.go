package wmbench

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/riverbus/riverbus/internal/benchkit"
)

func writeTable(w io.Writer, rep *Report) {
	rep.WritePreamble(w, "riverbus-watermill-bench: riverbus's Watermill adapter beside "+rep.Baseline+"; ",
		"riverbus / watermill-sql", "; BETTER says which way of the figures and of the ratio is better")
	fmt.Fprintln(w, "Settings: "+rep.Settings)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tRIVERBUS\tWATERMILL-SQL\tRATIO\tBETTER")
	var notes benchkit.Notes
	for _, r := range rep.Results {
		rb, wm, ratio := "-", "-", "-"
		if r.Error != "" {
			rb, wm, ratio = "FAILED: "+benchkit.OneLine(r.Error), "", ""
		} else {
			rb, wm = benchkit.FormatFigure(r.Riverbus, r.Unit), benchkit.FormatFigure(r.Baseline, r.Unit)
			ratio = benchkit.FormatFigure(r.Ratio, "ratio")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Metric, rb, wm, ratio, r.Better)
		notes.Add(r.Scenario, r.Note)
	}
	tw.Flush()
	notes.Write(w)
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
