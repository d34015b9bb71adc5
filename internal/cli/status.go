package cli

import (
	"context"
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

	"github.com/riverbus/riverbus/fanout"
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
}

type poolReport struct {
	Name            string           `json:"name"`
	Status          string           `json:"status"`
	Ordering        string           `json:"ordering"`
	Grouping        string           `json:"grouping"`
	Queue           string           `json:"queue"`
	StartAfter      int64            `json:"start_after"`
	Cursor          int64            `json:"cursor"`
	Checkpoint      int64            `json:"checkpoint"`
	Lag             int64            `json:"lag"`
	FannedOut       int64            `json:"events_fanned_out_total"`
	LateDelivered   int64            `json:"late_events_delivered_total"`
	Jobs            map[string]int64 `json:"jobs_by_state"`
	DeadLetters     int64            `json:"dead_letters"`
	LastError       string           `json:"last_error,omitempty"`
	CompletedPerMin int64            `json:"completed_last_minute"`
}

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
	h, err := fanout.GetHorizon(ctx, db)
	if err != nil {
		return nil, err
	}
	r := &statusReport{At: time.Now(), Horizon: h.Horizon, OpenGaps: h.OpenGaps, WatchedSkipped: h.Watching,
		GapsProvenDead: h.GapsProvenDead, GapsSkipped: h.GapsSkipped, LateEvents: h.LateEvents}
	if err := db.QueryRow(ctx, sqlStatusLastSequence).Scan(&r.LastSequence); err != nil {
		return nil, err
	}
	pools, err := fanout.ListPools(ctx, db)
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
	return r, err
}

func (r *statusReport) oneLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s horizon %d", r.At.Format("15:04:05"), r.Horizon)
	if r.OpenGaps > 0 {
		fmt.Fprintf(&b, " (open gaps %d)", r.OpenGaps)
	}
	for _, p := range r.Pools {
		done := p.Jobs["completed"]
		fmt.Fprintf(&b, " | %s lag %d done %d", p.Name, p.Lag, done)
		if p.DeadLetters > 0 {
			fmt.Fprintf(&b, " dead %d", p.DeadLetters)
		}
		if p.Status != fanout.PoolActive {
			fmt.Fprintf(&b, " [%s]", p.Status)
		}
	}
	return b.String()
}

func (r *statusReport) render(w io.Writer) error {
	fmt.Fprintf(w, "horizon %d (last sequence handed out %d)  open gaps %d  skipped and watched %d\n",
		r.Horizon, r.LastSequence, r.OpenGaps, r.WatchedSkipped)
	fmt.Fprintf(w, "since the start: gaps proven rolled back %d, skipped by timeout %d, late events %d\n\n",
		r.GapsProvenDead, r.GapsSkipped, r.LateEvents)
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
		if bar := progress(p, r.Horizon); bar != "" {
			fmt.Fprintf(w, "%s catching up: %s\n", p.Name, bar)
		}
	}
	return nil
}

// progress draws a bar with an ETA for a pool whose fan-out or processing is
// well behind the horizon.
func progress(p *poolReport, horizon int64) string {
	if horizon-p.StartAfter <= 0 || horizon-p.Checkpoint < 1000 {
		return ""
	}
	return progressBar(p.Checkpoint-p.StartAfter, horizon-p.StartAfter, p.CompletedPerMin)
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
					err = st.render(a.stdout)
				}
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
