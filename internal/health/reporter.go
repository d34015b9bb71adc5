package health

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/service"
)

// ReportIntervalDefault is how often a Reporter writes its report by
// default.
const ReportIntervalDefault = 10 * time.Second

// StaleAfter is how many report intervals a process's report may be late
// before readers call it stale: the process is gone, or cannot write to
// the database, and what it does now is unknown.
const StaleAfter = 3

// ExpireAfter is how long after its last report a process's rows are
// deleted (by any other process's report) and no longer shown.
const ExpireAfter = 15 * time.Minute

// ReporterConfig configures a Reporter.
type ReporterConfig struct {
	// Name is how status names the process ("riverbus work --pool
	// billing"). Empty: the program's name.
	Name string
	// Fanout: the process runs the horizon and the fan-out.
	Fanout bool
	// Queues are the River queues the process works, with their slots.
	Queues map[string]int
	// Interval is how often the report is written. Zero:
	// ReportIntervalDefault.
	Interval time.Duration
	// Logger receives the report's own failures, marked
	// Operation(OpReport). Nil: slog.Default().
	Logger *slog.Logger
}

// Reporter writes a process's report (riverbus_process: who it is, when it
// last reported, its worker slots; riverbus_process_error: its recent
// failures from a Recorder) until ctx ends, then deletes it.
//
// It writes once per interval, and once more soon after an operation fails
// that had not (at most once a second), so a storm of failures costs one
// small transaction per interval however many there are. A run of failures
// is rewritten only when it changed.
type Reporter struct {
	db   *pgxpool.Pool
	rec  *Recorder
	cfg  ReporterConfig
	id   string
	host string

	written map[Key]Failure // what the last committed report holds

	// TestSignals lets tests wait for reports.
	TestSignals ReporterTestSignals
}

// ReporterTestSignals are the Reporter's test signals.
type ReporterTestSignals struct {
	// Reported receives the error of every report (nil: written).
	Reported service.TestSignal[error]
}

// NewReporter returns a Reporter of rec's failures over db.
func NewReporter(db *pgxpool.Pool, rec *Recorder, cfg *ReporterConfig) *Reporter {
	c := *cfg
	if c.Interval <= 0 {
		c.Interval = ReportIntervalDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" && len(os.Args) > 0 {
		c.Name = os.Args[0]
	}
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Reporter{db: db, rec: rec, cfg: c, id: hex.EncodeToString(b[:]), host: host, written: map[Key]Failure{}}
}

// ID is the process's id in riverbus_process.
func (r *Reporter) ID() string { return r.id }

// newKeyGap is the least time between a report and one made early for a
// newly failing operation.
const newKeyGap = time.Second

// Run reports until ctx ends, then deletes the process's report and
// returns nil. A report that fails is logged and recorded (OpReport),
// and tried again at the next interval.
func (r *Reporter) Run(ctx context.Context) error {
	var last time.Time
	report := func() {
		last = time.Now()
		err := r.Report(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.cfg.Logger.Warn("process report failed: status shows this process's report as late until one succeeds",
				Operation(OpReport), "error", err)
		}
		r.TestSignals.Reported.Signal(err)
	}
	report()
	timer := time.NewTimer(r.cfg.Interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			r.Remove()
			return nil
		case <-timer.C:
		case <-r.rec.NewKey():
			if wait := time.Until(last.Add(min(newKeyGap, r.cfg.Interval))); wait > 0 {
				select {
				case <-ctx.Done():
					r.Remove()
					return nil
				case <-time.After(wait):
				}
			}
		}
		report()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(r.cfg.Interval)
	}
}

// Report writes the report now, in one transaction. Run calls it; a
// caller that does not Run may call it to report once.
func (r *Reporter) Report(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(r.cfg.Interval, 5*time.Second))
	defer cancel()
	recent := r.rec.Recent()
	queues, err := json.Marshal(r.cfg.Queues)
	if err != nil {
		return err
	}
	if r.cfg.Queues == nil {
		queues = []byte("{}")
	}
	now := time.Now()
	b := &pgx.Batch{}
	b.Queue(sqlReportSynchronousCommitOff)
	b.Queue(sqlReportProcess, r.id, r.cfg.Name, r.host, os.Getpid(), r.cfg.Interval, r.cfg.Fanout, queues)
	ops, subjects := make([]string, len(recent)), make([]string, len(recent))
	for i, f := range recent {
		ops[i], subjects[i] = f.Operation, f.Subject
		if w, ok := r.written[f.Key]; ok && w.Count == f.Count && w.Since.Equal(f.Since) {
			continue
		}
		b.Queue(sqlReportError, r.id, f.Operation, f.Subject, f.Count,
			now.Sub(f.Since).Seconds(), now.Sub(f.Last).Seconds(), f.Message)
	}
	b.Queue(sqlReportErrorsEnded, r.id, ops, subjects)
	b.Queue(sqlReportExpire, r.id, ExpireAfter)
	err = pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return err
	}
	clear(r.written)
	for _, f := range recent {
		r.written[f.Key] = f
	}
	return nil
}

// Remove deletes the process's report, as Run does when its ctx ends: a
// process that stops cleanly is not left to look stale.
func (r *Reporter) Remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = r.db.Exec(ctx, sqlReportRemove, r.id)
}

const (
	// A report is derived state that the next one rewrites: it need not
	// wait for its WAL flush.
	sqlReportSynchronousCommitOff = `SET LOCAL synchronous_commit = off`

	// Times by the database's clock, which readers compare them with.
	sqlReportProcess = `INSERT INTO riverbus_process (id, name, host, pid, started_at, reported_at, report_interval, fanout, queues)
VALUES ($1, $2, $3, $4, now(), now(), $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET reported_at = now(), report_interval = EXCLUDED.report_interval, queues = EXCLUDED.queues`

	// since and last_at are sent as ages, so they are by the database's
	// clock however far the process's is off.
	sqlReportError = `INSERT INTO riverbus_process_error (process_id, operation, subject, count, since, last_at, last_error)
VALUES ($1, $2, $3, $4, now() - make_interval(secs => $5), now() - make_interval(secs => $6), $7)
ON CONFLICT (process_id, operation, subject) DO UPDATE
SET count = EXCLUDED.count, since = EXCLUDED.since, last_at = EXCLUDED.last_at, last_error = EXCLUDED.last_error`

	sqlReportErrorsEnded = `DELETE FROM riverbus_process_error
WHERE process_id = $1 AND (operation, subject) NOT IN (SELECT * FROM unnest($2::text[], $3::text[]))`

	// A process killed without a word leaves its rows; the others delete
	// them once they are this old.
	sqlReportExpire = `DELETE FROM riverbus_process WHERE id <> $1 AND reported_at < now() - $2::interval`

	sqlReportRemove = `DELETE FROM riverbus_process WHERE id = $1`
)
