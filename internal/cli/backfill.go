package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/outbox"
)

// exitBackfillStopped is the exit code of a backfill stopped by a signal
// between batches: nothing is lost and the same command resumes it, but it
// has not finished, which a script must tell from success (0).
const exitBackfillStopped = 3

func (a *app) backfillCommand() *cobra.Command {
	var (
		p         outbox.BackfillParams
		queryFile string
		noCount   bool
		every     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "backfill --type TYPE (--query SQL | --query-file FILE)",
		Short: "Turn existing rows into events, each row once (resumable)",
		Long: `Appends one event of --type per row that the query returns: the query's
columns are id (unique, any type with an order), key, data (jsonb or json)
and optionally tags (text[]) and occurred_at. Rows are read in id order, in
batches of --batch-size (each id after the last, never OFFSET), in READ
ONLY transactions; each batch is appended in one transaction together with
the backfill's progress, so a run stopped at any point, kill -9 included,
and started again with the same command resumes after the last batch that
committed, and appends each row exactly once. Live appends and delivery go
on meanwhile: backfilled events get new sequences, after the events
committed before them.

Every event carries the tag backfill=NAME (NAME is --name, by default the
type) and metadata naming the backfill and the row's id: a pool created
with --tags backfill=NAME sees only the backfill. A pool that must not see
it filters on its types: give the backfill a type of its own
(docs/backfill.md).

Progress (rows, rows/s, ETA against a count made at the start unless
--no-count) goes to stderr every --progress-every. Ctrl-C or SIGTERM
stops after the batch in flight and says how to resume; a lost connection
is retried, resuming where the last batch committed.

Exit status: 0 finished (every row appended, or already there); 1 failure;
2 bad input: a flag, the query (a missing column, a type it cannot take, a
statement that writes) or a row (a duplicate or NULL id, a NULL key or
data, a key over 1024 bytes, a tag that is not name=value), named by its id
and column, with nothing of its batch appended: fix it and run the same
command again to resume there; 3 stopped by a signal before the end.`,
		Example: `  riverbus backfill --type customer.imported \
    --query "SELECT id, id AS key, to_jsonb(c) AS data FROM customers c"
  riverbus backfill --type order.imported --name orders-2024 --query-file orders.sql --rate 2000
  riverbus backfill --type customer.imported --query-file customers.sql --dry-run`,
		Args: exactArgs(0, "no arguments (use flags)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			usage := func(format string, args ...any) error {
				return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
			}
			if p.BatchSize < 1 || p.BatchSize > outbox.BackfillBatchSizeMax {
				return usage("--batch-size must be between 1 and %d, got %d", outbox.BackfillBatchSizeMax, p.BatchSize)
			}
			if p.Version < 1 || p.Version > outbox.VersionMax {
				return usage("--version must be between 1 and %d, got %d", outbox.VersionMax, p.Version)
			}
			if p.Rate < 0 {
				return usage("--rate must not be negative, got %v", p.Rate)
			}
			if every <= 0 {
				return usage("--progress-every must be positive, got %s", every)
			}
			if queryFile != "" {
				q, err := readQueryFile(cmd.InOrStdin(), queryFile)
				if err != nil {
					return usage("--query-file: %w", err)
				}
				p.Query = q
			}
			p.Count = !noCount
			db, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			r := &backfillReport{w: a.stderr, every: every, began: time.Now(), total: -1, dryRun: p.DryRun}
			return a.runBackfill(cmd.Context(), db, p, r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Type, "type", "", "event type of every backfilled event (required)")
	f.IntVar(&p.Version, "version", 1, fmt.Sprintf("version of the type's data that the query's data holds, 1 to %d (docs/evolving-events.md)", outbox.VersionMax))
	f.StringVar(&p.Query, "query", "", "SQL returning the rows: id, key, data [, tags] [, occurred_at]")
	f.StringVar(&queryFile, "query-file", "", "file holding the query (- for stdin)")
	f.StringVar(&p.Name, "name", "", "the backfill's name: its progress and its events' tag backfill=NAME (default: the type)")
	f.IntVar(&p.BatchSize, "batch-size", outbox.BackfillBatchSizeDefault, "rows read and appended per transaction")
	f.Float64Var(&p.Rate, "rate", 0, "at most this many rows per second (0: no limit)")
	f.BoolVar(&noCount, "no-count", false, "skip the count of the rows at the start (one scan of the query): no total, no ETA")
	f.BoolVar(&p.DryRun, "dry-run", false, "read and check every row, append nothing")
	f.DurationVar(&every, "progress-every", 5*time.Second, "how often to print progress on stderr")
	_ = cmd.MarkFlagRequired("type")
	cmd.MarkFlagsOneRequired("query", "query-file")
	cmd.MarkFlagsMutuallyExclusive("query", "query-file")
	return cmd
}

// readQueryFile reads a query from a file, or stdin for "-".
func readQueryFile(stdin io.Reader, path string) (string, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		return string(b), err
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

// runBackfill runs the backfill to its end, resuming after a lost
// connection (the batch in flight either committed with its progress or
// not at all, so the next call starts right), and reports how it ended.
func (a *app) runBackfill(ctx context.Context, db outbox.BackfillDB, p outbox.BackfillParams, r *backfillReport) error {
	p.Progress = r.progress
	backoff := 250 * time.Millisecond
	for {
		st, err := outbox.Backfill(ctx, db, p)
		r.runEnded(st)
		switch {
		case err == nil:
			r.line()
			fmt.Fprintln(a.stdout, r.summary())
			return nil
		case ctx.Err() != nil:
			r.line()
			return &exitError{code: exitBackfillStopped, err: fmt.Errorf("%s: stopped %s; run the same command again to resume",
				r.label(), r.where())}
		case errors.Is(err, outbox.ErrInvalidEvent):
			return err // a flag's value (the type, the name): bad input, with the usage
		case errors.Is(err, outbox.ErrInvalidBackfill):
			r.line()
			fmt.Fprintf(a.stderr, "%s: stopped at a bad row or query %s; fix it and run the same command again to resume there\n", r.label(), r.where())
			return &exitError{code: 2, err: err}
		case !lostConnection(err):
			r.line()
			return err
		}
		wait := backoff + time.Duration(rand.Int64N(int64(backoff/4)+1))
		a.logger.Warn("backfill: lost the database; resuming after the last committed batch", "backfill", r.name, "error", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			continue // reported by the next call, which appends nothing
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 15*time.Second)
		p.Count = false // the first count stands
	}
}

// lostConnection reports whether err is the database going away (a
// restart, a failover, a network fault) rather than something a retry
// would meet again.
func lostConnection(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow, pgerrcode.TooManyConnections,
			pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected:
			return true
		}
		return pgerrcode.IsConnectionException(pgErr.Code)
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}

// backfillReport prints a backfill's progress on stderr, at most every
// `every`, over the runs of one command (a lost connection starts another).
type backfillReport struct {
	w      io.Writer
	every  time.Duration
	began  time.Time
	dryRun bool

	name                   string
	total                  int64 // rows left at the start; -1 unknown
	earlier                int64 // rows handled by the command's ended runs
	appended, already      int64 // this command's, over its runs
	cur                    outbox.BackfillStatus
	started                bool
	lastLine               time.Time
	linePrinted, lastShown int64
}

// progress is the outbox.BackfillParams.Progress of each run.
func (r *backfillReport) progress(st outbox.BackfillStatus) {
	r.cur = st
	r.name = st.Name
	if !r.started {
		r.started = true
		if st.Total >= 0 {
			r.total = st.Total
		}
		switch {
		case st.Resumed:
			fmt.Fprintf(r.w, "%s: resuming after id %s (%d rows appended by earlier runs)\n", r.label(), safe(st.ResumedAfter), st.Before)
		default:
			fmt.Fprintf(r.w, "%s: starting\n", r.label())
		}
		r.lastLine = time.Now()
		return
	}
	if time.Since(r.lastLine) >= r.every {
		r.line()
	}
}

// runEnded adds a run's rows to the command's.
func (r *backfillReport) runEnded(st outbox.BackfillStatus) {
	if st.Name != "" {
		r.name = st.Name
	}
	r.cur = st
	r.appended += st.Appended
	r.already += st.Already
	r.earlier += st.Rows()
	r.cur.Appended, r.cur.Already = 0, 0
}

// rows is the rows the command has handled so far.
func (r *backfillReport) rows() int64 { return r.earlier + r.cur.Rows() }

func (r *backfillReport) label() string {
	if r.dryRun {
		return "backfill " + safe(r.name) + " (dry run)"
	}
	return "backfill " + safe(r.name)
}

// line prints the progress line, unless nothing changed since the last.
func (r *backfillReport) line() {
	if !r.started || (r.rows() == r.lastShown && r.linePrinted > 0) {
		return
	}
	r.lastLine = time.Now()
	r.linePrinted++
	rows := r.rows()
	r.lastShown = rows
	perSecond := float64(rows) / max(time.Since(r.began).Seconds(), 1e-3)
	if r.total < 0 {
		fmt.Fprintf(r.w, "%s: %d rows, %.0f rows/s\n", r.label(), rows, perSecond)
		return
	}
	eta := "unknown"
	if left := r.total - rows; left <= 0 {
		eta = "0s"
	} else if perSecond > 0 {
		eta = time.Duration(float64(left) / perSecond * float64(time.Second)).Round(time.Second).String()
	}
	pct := 100.0
	if r.total > 0 {
		pct = min(100, 100*float64(rows)/float64(r.total))
	}
	fmt.Fprintf(r.w, "%s: %d/%d rows (%.0f%%), %.0f rows/s, ETA %s\n", r.label(), rows, r.total, pct, perSecond, eta)
}

// where says where a stopped backfill stands.
func (r *backfillReport) where() string {
	if r.cur.LastID == "" {
		return "before its first batch"
	}
	return fmt.Sprintf("after id %s, with %d rows appended by this run", safe(r.cur.LastID), r.appended)
}

// summary is the line a finished backfill prints on stdout.
func (r *backfillReport) summary() string {
	took := time.Since(r.began)
	perSecond := float64(r.rows()) / max(took.Seconds(), 1e-3)
	if r.dryRun {
		return fmt.Sprintf("%s: finished: %d rows would be appended, %d already there; nothing was written (%s, %.0f rows/s)",
			r.label(), r.appended, r.already, took.Round(time.Millisecond), perSecond)
	}
	return fmt.Sprintf("%s: finished: %d events appended, %d rows already there, in %s (%.0f rows/s)",
		r.label(), r.appended, r.already, took.Round(time.Millisecond), perSecond)
}
