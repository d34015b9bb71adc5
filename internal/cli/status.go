package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
)

// summaryHeldMin is how long a stuck holder must have held its checkpoint
// before the one-line summary of `riverbus run` names it.
const summaryHeldMin = 10 * time.Second

// describe is one job in words, j the holder h or what blocks its lane:
// "event 12, retryable, attempt 3/5, next attempt 10:04:05 (in 20s), last
// error "…"".
func describe(h *checkpoint.Holder, j *checkpoint.Job) string {
	state := j.State
	if j.DeadLetter {
		state = "dead letter"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "event %d, %s", j.Sequence, state)
	if j.Lane != nil {
		fmt.Fprintf(&b, " in lane \"%s\"", safe(*j.Lane))
	}
	fmt.Fprintf(&b, ", attempt %d/%d", j.Attempt, j.MaxAttempts)
	if next, ok := j.NextAttempt(); ok {
		fmt.Fprintf(&b, ", next attempt %s (in %s)", next.Local().Format("15:04:05"), max(h.Until(next), 0).Round(time.Second))
	}
	if !j.DiscardedAt.IsZero() {
		fmt.Fprintf(&b, ", discarded %s", j.DiscardedAt.Local().Format("15:04:05"))
	}
	if j.LastError != "" {
		fmt.Fprintf(&b, ", last error \"%s\"", truncate(j.LastError, 200))
	}
	return b.String()
}

// holderLine explains what holds pool p's checkpoint, or "" when nothing
// stuck does.
func holderLine(p *riverbus.StatusPool) string {
	h := p.Holder
	if h == nil || !h.Stuck() {
		return ""
	}
	line := fmt.Sprintf("%s: checkpoint %d held for %s by job %d (%s)", p.Name, p.Checkpoint,
		h.HeldFor().Round(time.Second), h.ID, describe(h, &h.Job))
	switch b := h.LaneBlocker; {
	case b != nil && b.DeadLetter:
		line += fmt.Sprintf(", whose lane waits for dead letter %d (%s): `riverbus dlq retry %d` or `riverbus dlq purge %d` frees it",
			b.ID, describe(h, b), b.ID, b.ID)
	case b != nil:
		line += fmt.Sprintf(", whose lane waits for job %d (%s)", b.ID, describe(h, b))
	case h.State == "retryable" && h.Attempt < h.MaxAttempts:
		line += fmt.Sprintf("; after attempt %d it becomes a dead letter", h.MaxAttempts)
	}
	if p.Status == bustype.PoolPaused {
		line += "; the pool is paused (riverbus pool resume " + p.Name + ")"
	}
	return line
}

// aheadLine explains a pool whose position is above the end of the log, or
// is "" for a pool that is not.
func aheadLine(r *riverbus.Status, p *riverbus.StatusPool) string {
	if p.AheadOfLog <= 0 {
		return ""
	}
	what, pos := "cursor", p.Cursor
	if p.Checkpoint > pos {
		what, pos = "checkpoint", p.Checkpoint
	}
	if p.StartAfter > pos {
		what, pos = "start point", p.StartAfter
	}
	end := fmt.Sprintf("the last sequence handed out (%d)", r.LastSequence)
	if r.Horizon > r.LastSequence {
		end = fmt.Sprintf("the horizon (%d)", r.Horizon)
	}
	return fmt.Sprintf("%s: AHEAD OF THE LOG: %s %d is above %s: the events that get the next %d numbers will never reach it "+
		"(its lag reads 0). Reset it to the last event it handled: riverbus pool reset %s --to SEQ, SEQ at most %d",
		p.Name, what, pos, end, p.AheadOfLog, p.Name, max(r.Horizon, r.LastSequence))
}

// heldSummary is the short form of holderLine for the one-line summary.
// It leaves out a holder that has stood for less than summaryHeldMin (a
// pool whose handler fails now and then and retries within seconds is not
// worth a mention every few seconds).
func heldSummary(p *riverbus.StatusPool) string {
	h := p.Holder
	if h == nil || !h.Stuck() || h.HeldFor() < summaryHeldMin {
		return ""
	}
	b := h.Blocker()
	if b.DeadLetter {
		return fmt.Sprintf(" held by dead letter %d (event %d)", b.ID, b.Sequence)
	}
	s := fmt.Sprintf(" held by job %d (event %d, %s %d/%d", b.ID, b.Sequence, b.State, b.Attempt, b.MaxAttempts)
	if next, ok := b.NextAttempt(); ok {
		s += fmt.Sprintf(", next in %s", max(h.Until(next), 0).Round(time.Second))
	}
	return s + ")"
}

func oneLine(r *riverbus.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s horizon %d", r.At.Format("15:04:05"), r.Horizon)
	if r.OpenGaps > 0 {
		fmt.Fprintf(&b, " (open gaps %d)", r.OpenGaps)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, " PROBLEM %s", p.Code)
	}
	b.WriteString(processesSummary(r))
	for _, p := range r.Pools {
		done := p.Jobs["completed"]
		fmt.Fprintf(&b, " | %s lag %d done %d", p.Name, p.Lag, done)
		if p.Status == bustype.PoolPaused {
			b.WriteString(" PAUSED")
		}
		if p.DeadLetters > 0 {
			fmt.Fprintf(&b, " dead %d", p.DeadLetters)
		}
		if p.AheadOfLog > 0 {
			fmt.Fprintf(&b, " AHEAD OF THE LOG by %d", p.AheadOfLog)
		}
		if p.RunningAboveWorkers > 0 {
			fmt.Fprintf(&b, " RUNNING ABOVE WORKERS by %d", p.RunningAboveWorkers)
		}
		b.WriteString(heldSummary(p))
		if p.Status != bustype.PoolActive {
			fmt.Fprintf(&b, " [%s]", p.Status)
		}
	}
	return b.String()
}

// render writes the report as text. prev is the report of the previous
// refresh (status --watch), or nil: a pool's progress bar needs it to tell
// catching up from falling behind.
func render(w io.Writer, r, prev *riverbus.Status) error {
	fmt.Fprintf(w, "horizon %d (last sequence handed out %d, last committed %d)  open gaps %d  skipped and watched %d\n",
		r.Horizon, r.LastSequence, r.LastCommitted, r.OpenGaps, r.WatchedSkipped)
	if stalled := time.Duration(r.HorizonAgeSeconds * float64(time.Second)); r.LastCommitted > r.Horizon && stalled >= checkpoint.StuckAfter {
		fmt.Fprintf(w, "HORIZON STALLED: committed events up to %d wait above the horizon, which has not changed for %s: "+
			"is a fan-out running (riverbus fanout or riverbus run)? Else an open gap or a problem below holds it.\n",
			r.LastCommitted, stalled.Round(time.Second))
	}
	fmt.Fprintf(w, "since the start: gaps proven rolled back %d, skipped by timeout %d, late events %d",
		r.GapsProvenDead, r.GapsSkipped, r.LateEvents)
	if r.RetentionEventsTrimmed > 0 {
		fmt.Fprintf(w, ", events deleted by retention %d (the log begins after %d)", r.RetentionEventsTrimmed, r.RetentionTrimmedThrough)
	}
	fmt.Fprint(w, "\n")
	if f := r.LastFailover; f != nil {
		fmt.Fprintf(w, "last failover %s (%d in all): WAL timeline %d to %d; numbers %d to %d skipped as one gap so none is used twice, "+
			"%d events renumbered above it, %d jobs running on the old timeline retried\n",
			f.At.Format(time.RFC3339), r.Failovers, f.OldTimeline, f.NewTimeline, f.HorizonBefore+1, f.HorizonAfter,
			f.EventsRenumbered, f.JobsRescued)
	}
	fmt.Fprint(w, "\n")
	for _, p := range r.Problems {
		fmt.Fprintf(w, "PROBLEM %s (%s): %s\n  fix: %s\n\n", p.Code, p.Detail, p.Message, p.Fix)
	}
	if lines := processLines(r); len(lines) > 0 {
		for _, line := range lines {
			fmt.Fprintln(w, line)
		}
		fmt.Fprintln(w)
	}
	if len(r.Pools) == 0 {
		fmt.Fprintln(w, "no pools yet: create one with `riverbus pool create NAME`")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tSTATUS\tORDERING\tCURSOR\tCHECKPOINT\tLAG\tLAG TIME\tCHECKPOINT TIME\tJOBS\tDEAD\tDONE/MIN\tLAST ERROR")
	for _, p := range r.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\n", safe(p.Name), poolState(p), p.Ordering, p.Cursor, p.Checkpoint, p.Lag,
			lagTime(p), checkpointTime(p), jobsSummary(p.Jobs), p.DeadLetters, p.CompletedLastMinute, truncate(p.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Pools {
		if line := aheadLine(r, p); line != "" {
			fmt.Fprintln(w, line)
		}
		if line := runningLine(p); line != "" {
			fmt.Fprintln(w, line)
		}
		if line := holderLine(p); line != "" {
			fmt.Fprintln(w, line)
		} else if line := progress(r, p, prev); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// poolState is the STATUS column: the pool's condition (active, paused,
// stalled, held, catching up), as the riverbus page shows it; its status
// when the condition is unknown.
func poolState(p *riverbus.StatusPool) string {
	if p.Condition != "" {
		return p.Condition.String()
	}
	return string(p.Status)
}

// lagTime is the LAG TIME column: how long ago the oldest event the pool
// has not finished was appended; "-" when it is not behind.
func lagTime(p *riverbus.StatusPool) string {
	if p.Lag <= 0 || p.LagSeconds <= 0 {
		return "-"
	}
	return time.Duration(p.LagSeconds * float64(time.Second)).Round(time.Second).String()
}

// checkpointTime is the CHECKPOINT TIME column: when the newest event at
// or below the checkpoint was appended, in UTC to the second, as `pool
// reset --to-time` takes it; "-" when no such event is in the log.
func checkpointTime(p *riverbus.StatusPool) string {
	if p.CheckpointTime == nil {
		return "-"
	}
	return p.CheckpointTime.UTC().Format(time.RFC3339)
}

// progressMin is the lag from which status draws a pool's progress.
const progressMin = riverbus.StatusCatchingUpLag

// progress is the line for a pool well behind the horizon whose checkpoint
// is not stuck: a bar with an ETA while it catches up, "falling behind"
// while its lag grows.
//
// The bar is the share of the pool's events (since its start) that are
// finished: (checkpoint − start) / (horizon − start). Between two
// refreshes where the lag did not grow, the checkpoint gained at least as
// much as the horizon, so the share did not shrink: the bar never goes
// backwards. When the lag grows, the share may shrink, and there is no bar:
// the pool is not catching up. Without a previous refresh (one-shot
// status) the bar is drawn and the ETA uses the jobs completed in the
// last minute.
func progress(r *riverbus.Status, p *riverbus.StatusPool, prev *riverbus.Status) string {
	if p.Status == bustype.PoolPaused {
		// A paused pool is not catching up, however fast its last jobs
		// went: it stays where it is until resumed.
		if p.Lag <= 0 {
			return ""
		}
		return fmt.Sprintf("%s paused: %d behind, waiting for `riverbus pool resume %s`", p.Name, p.Lag, p.Name)
	}
	if r.Horizon-p.StartAfter <= 0 || p.Lag < progressMin {
		return ""
	}
	var before *riverbus.StatusPool
	if prev != nil {
		for _, q := range prev.Pools {
			if q.Name == p.Name && q.StartAfter == p.StartAfter {
				before = q
			}
		}
	}
	perMinute := p.CompletedLastMinute
	if before != nil {
		if p.Lag > before.Lag {
			return fmt.Sprintf("%s falling behind: %d behind, %d more than %s ago (%d jobs done in the last minute)",
				p.Name, p.Lag, p.Lag-before.Lag, r.At.Sub(prev.At).Round(time.Second), p.CompletedLastMinute)
		}
		perMinute = 0
		if elapsed := r.At.Sub(prev.At); elapsed > 0 {
			perMinute = int64(float64(before.Lag-p.Lag) / elapsed.Minutes())
		}
	}
	bar := progressBar(p.Checkpoint-p.StartAfter, r.Horizon-p.StartAfter, perMinute)
	if why := notHealthy(r, p); why != "" {
		// A rate measured while something fails is no promise: the
		// failing part may be what the pool waits for.
		bar, _, _ = strings.Cut(bar, "  ETA ")
		bar += "  no ETA: " + why
	}
	return fmt.Sprintf("%s catching up: %s", p.Name, bar)
}

// notHealthy says why pool p's progress cannot be trusted to go on: an
// operation that concerns it failed recently, a process stopped
// reporting, or jobs run above its workers; "" when none of these.
func notHealthy(r *riverbus.Status, p *riverbus.StatusPool) string {
	if errs := r.ErrorsFor(p); len(errs) > 0 {
		return fmt.Sprintf("%s failing (see ERROR above)", errorName(errs[0].StatusError))
	}
	for _, proc := range r.Processes {
		if proc.Stale {
			return fmt.Sprintf("%s stopped reporting (see STALE above)", safe(proc.Name))
		}
	}
	if p.RunningAboveWorkers > 0 {
		return "jobs running above its workers (see RUNNING ABOVE WORKERS)"
	}
	return ""
}

// errorName is an operation with what it failed for: `pool batch of
// "billing"`.
func errorName(e riverbus.StatusError) string {
	if e.Subject == "" {
		return e.Operation
	}
	return fmt.Sprintf("%s of \"%s\"", e.Operation, safe(e.Subject))
}

// processName is how status names a process: `riverbus work --pool
// billing (pid 4711 on worker-3)`.
func processName(p *riverbus.StatusProcess) string {
	return fmt.Sprintf("%s (pid %d on %s)", safe(p.Name), p.PID, safe(p.Host))
}

// processLines are the ERROR and STALE lines of the processes: what each
// failed at recently, and which stopped reporting.
func processLines(r *riverbus.Status) []string {
	var lines []string
	for _, p := range r.Processes {
		if p.Stale {
			lines = append(lines, fmt.Sprintf("STALE: %s has not reported for %s (it reports every %s): it was killed, or it cannot write "+
				"to the database (a full disk, a read-only server). What it does now is unknown; its errors below are as of its last report, "+
				"and its own metrics (riverbus_process_errors_total) need no database.",
				processName(p), seconds(p.ReportAgeSeconds), seconds(p.ReportIntervalSeconds)))
		}
		for _, e := range p.Errors {
			lines = append(lines, fmt.Sprintf("ERROR in %s: %s failed %d %s since %s, last %s ago: \"%s\"",
				processName(p), errorName(e), e.Count, plural(e.Count, "time", "times"), e.Since.Local().Format("15:04:05"),
				seconds(e.LastAgeSeconds), truncate(e.LastError, 300)))
		}
	}
	return lines
}

// processesSummary is the processes' part of the one-line summary.
func processesSummary(r *riverbus.Status) string {
	var b strings.Builder
	for _, p := range r.Processes {
		if p.Stale {
			fmt.Fprintf(&b, " STALE %s", processName(p))
		}
		for _, e := range p.Errors {
			fmt.Fprintf(&b, " ERROR %s x%d", errorName(e), e.Count)
		}
	}
	return b.String()
}

// runningLine flags a pool whose jobs River shows running far beyond what
// its workers can hold, or is "".
func runningLine(p *riverbus.StatusPool) string {
	if p.RunningAboveWorkers <= 0 {
		return ""
	}
	slots := fmt.Sprintf("the %d worker slots the processes report for queue \"%s\"", p.WorkerSlots, safe(p.Queue))
	if p.WorkerSlots == 0 {
		slots = fmt.Sprintf("no worker slot: no process reports workers for queue \"%s\"", safe(p.Queue))
	}
	return fmt.Sprintf("%s: RUNNING ABOVE WORKERS: %d jobs running for over %s, %d more than %s, so no worker runs them: "+
		"their completions failed (see ERROR lines) or their workers died, and River's rescuer has not retried them yet. "+
		"The checkpoint (and an ordered pool's lanes) wait for them.",
		safe(p.Name), p.RunningStuck, checkpoint.StuckAfter, p.RunningAboveWorkers, slots)
}

// seconds is a duration in seconds, rounded for people.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// progressBar draws done of total with an ETA at perMinute.
func progressBar(done, total, perMinute int64) string {
	frac := 1.0
	if total > 0 {
		frac = min(1, max(0, float64(done)/float64(total)))
	}
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	eta := "unknown"
	if perMinute > 0 {
		eta = (time.Duration(float64(total-done) / float64(perMinute) * float64(time.Minute))).Round(time.Second).String()
	}
	return fmt.Sprintf("[%s] %.1f%%  %d behind  ETA %s", bar, 100*frac, total-done, eta)
}

func jobsSummary(jobs map[bustype.JobState]int64) string {
	if len(jobs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(jobs))
	for _, s := range slices.Sorted(maps.Keys(jobs)) {
		parts = append(parts, fmt.Sprintf("%s=%d", s, jobs[s]))
	}
	return strings.Join(parts, ",")
}

// truncate escapes s for the terminal (see safe) and cuts it to n runes.
func truncate(s string, n int) string {
	s = safe(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func (a *app) statusCommand() *cobra.Command {
	var (
		asJSON bool
		watch  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Horizon, gaps, late events, and per pool: cursor, checkpoint, lag, jobs, dead letters",
		Example: `  riverbus status
  riverbus status --json
  riverbus status --watch          # refresh every 2s until Ctrl-C
  riverbus status --watch 10s`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var prev *riverbus.Status
			for {
				st, err := client.Status(cmd.Context())
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
				if asJSON {
					err = writeJSON(a.stdout, st)
				} else {
					if watch > 0 {
						fmt.Fprintf(a.stdout, "\n%s\n", st.At.Format(time.DateTime))
					}
					err = render(a.stdout, st, prev)
				}
				prev = st
				if err != nil || watch <= 0 {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(watch):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&watch, "watch", 0, "refresh at this interval until Ctrl-C")
	cmd.Flags().Lookup("watch").NoOptDefVal = "2s"
	return cmd
}
