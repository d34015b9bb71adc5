package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/checkpoints"
	"github.com/riverbus/riverbus/internal/engine"
	"github.com/riverbus/riverbus/internal/pools"
)

// statusReport is what `riverbus status` shows, and its JSON form.
type statusReport struct {
	At             time.Time     `json:"at"`
	Horizon        int64         `json:"horizon"`
	LastSequence   int64         `json:"last_sequence"`
	OpenGaps       int64         `json:"open_gaps"`
	WatchedSkipped int64         `json:"watched_skipped"`
	GapsProvenDead int64         `json:"gaps_proven_dead_total"`
	GapsSkipped    int64         `json:"gaps_skipped_total"`
	LateEvents     int64         `json:"late_events_total"`
	Pools          []*poolReport `json:"pools"`

	// Problems: broken assumptions of the gap proof (engine.CheckAssumptions).
	Problems []engine.Problem `json:"problems"`
}

// poolReport is one pool in the status. Its LastError is the error that
// matters most now: that of the job holding the checkpoint (or of what
// blocks its lane) when it is stuck, else the newest dead letter's.
type poolReport struct {
	Name            string             `json:"name"`
	Status          bustype.PoolStatus `json:"status"`
	Ordering        string             `json:"ordering"`
	Grouping        bustype.Grouping   `json:"grouping"`
	Queue           string             `json:"queue"`
	StartAfter      int64              `json:"start_after"`
	Cursor          int64              `json:"cursor"`
	Checkpoint      int64              `json:"checkpoint"`
	Lag             int64              `json:"lag"`
	FannedOut       int64              `json:"events_fanned_out_total"`
	LateDelivered   int64              `json:"late_events_delivered_total"`
	Jobs            map[string]int64   `json:"jobs_by_state"`
	DeadLetters     int64              `json:"dead_letters"`
	LastError       string             `json:"last_error,omitempty"`
	CompletedPerMin int64              `json:"completed_last_minute"`
	Holder          *holderReport      `json:"checkpoint_holder,omitempty"`
}

// jobReport is a job in the status: one holding a checkpoint, or what
// blocks its lane.
type jobReport struct {
	JobID       int64  `json:"job_id"`
	Sequence    int64  `json:"global_sequence"`
	State       string `json:"state"`
	DeadLetter  bool   `json:"dead_letter,omitempty"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	// NextAttemptAt is set for a retryable or scheduled job.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	DiscardedAt   *time.Time `json:"discarded_at,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	Lane          *string    `json:"lane,omitempty"`
	// nextIn is NextAttemptAt by the database's clock, for the text.
	nextIn time.Duration
}

// holderReport is the job holding a pool's checkpoint (checkpoint.Holder).
type holderReport struct {
	jobReport
	HeldSince   time.Time `json:"held_since"`
	HeldSeconds float64   `json:"held_seconds"`
	// LaneBlockedBy is what a pending holder's lane waits for.
	LaneBlockedBy *jobReport `json:"lane_blocked_by,omitempty"`
	// Stuck: the holder, or what blocks its lane, has failed, waits for a
	// retry or is a dead letter, or the checkpoint has stood still for
	// stuckAfter. The text output then explains it, instead of a progress
	// bar.
	Stuck bool `json:"stuck"`
}

// stuckAfter is how long a checkpoint may stand still behind a job that has
// not failed before status calls it stuck (a handler that hangs, a
// worker that is not running).
const stuckAfter = time.Minute

// summaryHeldMin is how long a stuck holder must have held its checkpoint
// before the one-line summary of `riverbus run` names it.
const summaryHeldMin = 10 * time.Second

const sqlStatusJobs = `SELECT kind, state::text, count(*) FROM river_job
WHERE kind IN (SELECT name FROM riverbus_pool) GROUP BY kind, state`

const sqlStatusDeadLetters = `SELECT pool, count(*),
	(SELECT d2.errors->-1->>'error' FROM riverbus_dead_letter d2 WHERE d2.pool = d.pool ORDER BY d2.discarded_at DESC LIMIT 1)
FROM riverbus_dead_letter d GROUP BY pool`

const sqlStatusRecent = `SELECT kind, count(*) FROM river_job
WHERE kind IN (SELECT name FROM riverbus_pool) AND state = 'completed' AND finalized_at > now() - interval '1 minute'
GROUP BY kind`

const sqlStatusLastSequence = `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM riverbus_event_global_sequence`

func loadStatus(ctx context.Context, db *pgxpool.Pool) (*statusReport, error) {
	h, err := engine.GetHorizon(ctx, db)
	if err != nil {
		return nil, err
	}
	r := &statusReport{At: time.Now(), Horizon: h.Horizon, OpenGaps: h.OpenGaps, WatchedSkipped: h.Watching,
		GapsProvenDead: h.GapsProvenDead, GapsSkipped: h.GapsSkipped, LateEvents: h.LateEvents, Problems: h.Problems}
	if r.Problems == nil {
		r.Problems = []engine.Problem{}
	}
	if err := db.QueryRow(ctx, sqlStatusLastSequence).Scan(&r.LastSequence); err != nil {
		return nil, err
	}
	pools, err := pools.List(ctx, db)
	if err != nil {
		return nil, err
	}
	byName := map[string]*poolReport{}
	for _, p := range pools {
		pr := &poolReport{Name: p.Name, Status: p.Status, Queue: p.Queue, Ordering: orderingLabel(p), Grouping: p.Grouping, StartAfter: p.StartAfter, Cursor: p.Cursor,
			Checkpoint: p.Checkpoint, Lag: max(0, h.Horizon-p.Checkpoint), FannedOut: p.EventsFannedOut,
			LateDelivered: p.LateEventsDelivered, Jobs: map[string]int64{}}
		r.Pools = append(r.Pools, pr)
		byName[p.Name] = pr
	}
	rows, err := db.Query(ctx, sqlStatusJobs)
	if err != nil {
		return nil, err
	}
	var kind, state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&kind, &state, &n}, func() error {
		if pr := byName[kind]; pr != nil {
			pr.Jobs[state] = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, pr := range r.Pools {
		h, err := checkpoints.GetHolder(ctx, db, pr.Name)
		if errors.Is(err, bustype.ErrUnknownPool) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		pr.Holder = newHolderReport(h)
	}
	var lastErr *string
	rows, err = db.Query(ctx, sqlStatusDeadLetters)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&kind, &n, &lastErr}, func() error {
		if pr := byName[kind]; pr != nil {
			pr.DeadLetters = n
			if lastErr != nil {
				pr.LastError = *lastErr
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, sqlStatusRecent)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&kind, &n}, func() error {
		if pr := byName[kind]; pr != nil {
			pr.CompletedPerMin = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, pr := range r.Pools {
		if h := pr.Holder; h != nil && h.Stuck {
			if e := h.blockerOrSelf().LastError; e != "" {
				pr.LastError = e
			}
		}
	}
	return r, nil
}

func newJobReport(j bustype.PoolJob, at time.Time) jobReport {
	r := jobReport{JobID: j.ID, Sequence: j.Sequence, State: string(j.State), DeadLetter: j.DeadLetter,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, LastError: j.LastError, Lane: j.Lane}
	if (j.State == "retryable" || j.State == "scheduled") && !j.ScheduledAt.IsZero() {
		next := j.ScheduledAt
		r.NextAttemptAt = &next
		r.nextIn = j.ScheduledAt.Sub(at)
	}
	if !j.DiscardedAt.IsZero() {
		d := j.DiscardedAt
		r.DiscardedAt = &d
	}
	return r
}

func newHolderReport(h *bustype.CheckpointHolder) *holderReport {
	if h == nil {
		return nil
	}
	r := &holderReport{jobReport: newJobReport(h.PoolJob, h.At), HeldSince: h.HeldSince, HeldSeconds: h.HeldFor().Seconds()}
	if h.LaneBlocker != nil {
		b := newJobReport(*h.LaneBlocker, h.At)
		r.LaneBlockedBy = &b
	}
	r.Stuck = h.HeldFor() >= stuckAfter || r.troubled() || (r.LaneBlockedBy != nil && r.LaneBlockedBy.troubled())
	return r
}

// troubled: the job has failed, waits for a retry, or is a dead letter.
func (j *jobReport) troubled() bool {
	return j.DeadLetter || j.LastError != "" || j.State == "retryable" || j.State == "scheduled"
}

// blockerOrSelf is what blocks the holder's lane, or else the holder.
func (h *holderReport) blockerOrSelf() *jobReport {
	if h.LaneBlockedBy != nil {
		return h.LaneBlockedBy
	}
	return &h.jobReport
}

// describe is one job in words: "event 12, retryable, attempt 3/5, next
// attempt 10:04:05 (in 20s), last error "…"".
func (j *jobReport) describe() string {
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
	if j.NextAttemptAt != nil {
		fmt.Fprintf(&b, ", next attempt %s (in %s)", j.NextAttemptAt.Local().Format("15:04:05"), max(j.nextIn, 0).Round(time.Second))
	}
	if j.DiscardedAt != nil {
		fmt.Fprintf(&b, ", discarded %s", j.DiscardedAt.Local().Format("15:04:05"))
	}
	if j.LastError != "" {
		fmt.Fprintf(&b, ", last error \"%s\"", truncate(j.LastError, 200))
	}
	return b.String()
}

// holderLine explains what holds pool p's checkpoint, or "" when nothing
// stuck does.
func holderLine(p *poolReport) string {
	h := p.Holder
	if h == nil || !h.Stuck {
		return ""
	}
	line := fmt.Sprintf("%s: checkpoint %d held for %s by job %d (%s)", p.Name, p.Checkpoint,
		time.Duration(h.HeldSeconds*float64(time.Second)).Round(time.Second), h.JobID, h.describe())
	switch b := h.LaneBlockedBy; {
	case b != nil && b.DeadLetter:
		line += fmt.Sprintf(", whose lane waits for dead letter %d (%s): `riverbus dlq retry %d` or `riverbus dlq purge %d` frees it",
			b.JobID, b.describe(), b.JobID, b.JobID)
	case b != nil:
		line += fmt.Sprintf(", whose lane waits for job %d (%s)", b.JobID, b.describe())
	case h.State == "retryable" && h.Attempt < h.MaxAttempts:
		line += fmt.Sprintf("; after attempt %d it becomes a dead letter", h.MaxAttempts)
	}
	if p.Status == bustype.PoolPaused {
		line += "; the pool is paused (riverbus pool resume " + p.Name + ")"
	}
	return line
}

// heldSummary is the short form of holderLine for the one-line summary.
// It leaves out a holder that has stood for less than summaryHeldMin (a
// pool whose handler fails now and then and retries within seconds is not
// worth a mention every few seconds).
func heldSummary(p *poolReport) string {
	h := p.Holder
	if h == nil || !h.Stuck || h.HeldSeconds < summaryHeldMin.Seconds() {
		return ""
	}
	b := h.blockerOrSelf()
	if b.DeadLetter {
		return fmt.Sprintf(" held by dead letter %d (event %d)", b.JobID, b.Sequence)
	}
	s := fmt.Sprintf(" held by job %d (event %d, %s %d/%d", b.JobID, b.Sequence, b.State, b.Attempt, b.MaxAttempts)
	if b.NextAttemptAt != nil {
		s += fmt.Sprintf(", next in %s", max(b.nextIn, 0).Round(time.Second))
	}
	return s + ")"
}

func (r *statusReport) oneLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s horizon %d", r.At.Format("15:04:05"), r.Horizon)
	if r.OpenGaps > 0 {
		fmt.Fprintf(&b, " (open gaps %d)", r.OpenGaps)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, " PROBLEM %s", p.Code)
	}
	for _, p := range r.Pools {
		done := p.Jobs["completed"]
		fmt.Fprintf(&b, " | %s lag %d done %d", p.Name, p.Lag, done)
		if p.DeadLetters > 0 {
			fmt.Fprintf(&b, " dead %d", p.DeadLetters)
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
func (r *statusReport) render(w io.Writer, prev *statusReport) error {
	fmt.Fprintf(w, "horizon %d (last sequence handed out %d)  open gaps %d  skipped and watched %d\n",
		r.Horizon, r.LastSequence, r.OpenGaps, r.WatchedSkipped)
	fmt.Fprintf(w, "since the start: gaps proven rolled back %d, skipped by timeout %d, late events %d\n\n",
		r.GapsProvenDead, r.GapsSkipped, r.LateEvents)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "PROBLEM %s (%s): %s\n  fix: %s\n\n", p.Code, p.Detail, p.Message, p.Fix)
	}
	if len(r.Pools) == 0 {
		fmt.Fprintln(w, "no pools yet: create one with `riverbus pool create NAME`")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tSTATUS\tORDERING\tCURSOR\tCHECKPOINT\tLAG\tJOBS\tDEAD\tDONE/MIN\tLAST ERROR")
	for _, p := range r.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", safe(p.Name), p.Status, p.Ordering, p.Cursor, p.Checkpoint, p.Lag,
			jobsSummary(p.Jobs), p.DeadLetters, p.CompletedPerMin, truncate(p.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Pools {
		if line := holderLine(p); line != "" {
			fmt.Fprintln(w, line)
		} else if line := r.progress(p, prev); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// progressMin is the lag from which status draws a pool's progress.
const progressMin = 1000

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
func (r *statusReport) progress(p *poolReport, prev *statusReport) string {
	if r.Horizon-p.StartAfter <= 0 || p.Lag < progressMin {
		return ""
	}
	var before *poolReport
	if prev != nil {
		for _, q := range prev.Pools {
			if q.Name == p.Name && q.StartAfter == p.StartAfter {
				before = q
			}
		}
	}
	perMinute := p.CompletedPerMin
	if before != nil {
		if p.Lag > before.Lag {
			return fmt.Sprintf("%s falling behind: %d behind, %d more than %s ago (%d jobs done in the last minute)",
				p.Name, p.Lag, p.Lag-before.Lag, r.At.Sub(prev.At).Round(time.Second), p.CompletedPerMin)
		}
		perMinute = 0
		if elapsed := r.At.Sub(prev.At); elapsed > 0 {
			perMinute = int64(float64(before.Lag-p.Lag) / elapsed.Minutes())
		}
	}
	return fmt.Sprintf("%s catching up: %s", p.Name, progressBar(p.Checkpoint-p.StartAfter, r.Horizon-p.StartAfter, perMinute))
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

func jobsSummary(jobs map[string]int64) string {
	if len(jobs) == 0 {
		return "-"
	}
	states := make([]string, 0, len(jobs))
	for s := range jobs {
		states = append(states, s)
	}
	sort.Strings(states)
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%s=%d", s, jobs[s])
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
			db, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			var prev *statusReport
			for {
				st, err := loadStatus(cmd.Context(), db)
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
					err = st.render(a.stdout, prev)
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
