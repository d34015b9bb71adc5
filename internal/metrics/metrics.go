package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/horizon"
)

// Namespace is the prefix of every riverbus metric.
const Namespace = "riverbus"

// Defaults of CollectorOpts fields.
const (
	TimeoutDefault = 5 * time.Second
	MaxAgeDefault  = time.Second
)

var (
	descUp             = newDesc("up", "1 when the last scrape read riverbus's state from the database, 0 when it failed.")
	descScrapeDuration = newDesc("scrape_duration_seconds", "How long reading riverbus's state from the database took.")
	descStateReads     = newDesc("state_reads_total", "Reads of riverbus's state from the database; scrapes closer together than the collector's max age share one.")

	descHorizon        = newDesc("horizon", "Global horizon: every sequence at or below it is visible or will never commit.")
	descHorizonAge     = newDesc("horizon_age_seconds", "Seconds since the horizon row last changed (the horizon moved, or a gap was recorded, proven or skipped), by the database's clock; it also grows while nothing is appended.")
	descLastSequence   = newDesc("last_sequence", "Last global sequence handed out (0 before the first event); committed, in flight or rolled back.")
	descLastCommitted  = newDesc("last_committed_sequence", "Highest global sequence of a committed event; above riverbus_horizon, committed events wait for the horizon.")
	descOpenGaps       = newDesc("open_gaps", "Open gaps: runs of missing sequences just above the horizon.")
	descWatchedSkipped = newDesc("watched_skipped", "Sequences in the ranges the horizon skipped by the gap timeout that are watched for a late commit.")
	descGapsProvenDead = newDesc("gaps_proven_dead_total", "Missing sequences proven rolled back.")
	descGapsSkipped    = newDesc("gaps_skipped_total", "Missing sequences skipped by the gap timeout.")
	descFailovers      = newDesc("failovers_total", "Failovers riverbus fenced: the database went over to a new WAL timeline (a promoted standby, a point-in-time recovery) and the sequences were moved past every number the old one handed out.")
	descLastFailover   = newDesc("last_failover_timestamp_seconds", "When riverbus last fenced a failover (Unix time); 0: never.")
	descLateEvents     = newDesc("late_events_total", "Skipped sequences that committed after all (late events).")
	descHorizonProblem = newDesc("horizon_problem", "1 while an assumption of the gap proof is broken (see fanout.CheckAssumptions and riverbus status); while one with blocks=\"true\" holds, the horizon proves and skips no gap.", "problem", "blocks")

	descRetentionTrimmed = newDesc("retention_trimmed_through", "Where the event log begins after retention: every event at or below it may have been deleted (0: none).")
	descRetentionEvents  = newDesc("retention_events_trimmed_total", "Events deleted by event retention.")
	descRetentionEnabled = newDesc("retention_enabled", "1 while an event retention policy is set (riverbus retention set), else 0.")
	descRetentionKeep    = newDesc("retention_keep_seconds", "The retention policy's keep period in seconds (0: until every pool has passed an event).")
	descOldestEventAge   = newDesc("oldest_event_age_seconds", "How long ago (by the database's clock) the oldest event still in the log was appended, whatever its occurred_at says; 0 when the log is empty.")

	descPoolCursor     = newDesc("pool_cursor", "Every event at or below the cursor has been turned into a job of the pool or filtered out.", "pool")
	descPoolCheckpoint = newDesc("pool_checkpoint", "Every job of the pool for an event at or below the checkpoint is finished (as last stored).", "pool")
	descPoolLag        = newDesc("pool_lag", "Horizon minus checkpoint: events the pool has not finished yet (0 when the checkpoint is ahead).", "pool")
	descPoolFannedOut  = newDesc("pool_events_fanned_out_total", "Jobs the fan-out created for the pool, late events included.", "pool")
	descPoolLate       = newDesc("pool_late_events_delivered_total", "Late events delivered to the pool.", "pool")
	descPoolJobs       = newDesc("pool_jobs", "River jobs of the pool by state.", "pool", "state")
	descPoolDead       = newDesc("pool_dead_letters", "Dead letters of the pool: discarded jobs kept until retried or purged.", "pool")
	descPoolUndeliv    = newDesc("pool_undeliverable_dead_letters", "Dead letters of the pool made of events the fan-out could not turn into jobs (too deep or too big), of pool_dead_letters.", "pool")
	descPoolPaused     = newDesc("pool_paused", "1 when the pool's fan-out is paused.", "pool")
	descPoolAhead      = newDesc("pool_ahead_of_log", "How far the pool's cursor, checkpoint or start point is above the end of the log (the last sequence handed out, or the horizon when higher); 0 normally. Above 0, the events that get the numbers in between will never reach the pool.", "pool")
	descPoolHeld       = newDesc("pool_checkpoint_held_seconds", "How long the pool's checkpoint has stood still behind its oldest unfinished job; 0 when it has none.", "pool")
	descPoolHolderTry  = newDesc("pool_checkpoint_holder_attempts", "Attempts so far of the oldest unfinished job, which holds the pool's checkpoint; 0 when it has none.", "pool")
	descPoolSlots      = newDesc("pool_worker_slots", "Jobs of the pool's queue the reporting processes' River clients can hold running at once.", "pool")
	descPoolRunAbove   = newDesc("pool_running_above_workers", "The pool's jobs River shows running for over a minute beyond the worker slots of their queue: no worker runs them (completions failed, or their workers died and River's rescuer has not retried them yet); 0 normally.", "pool")

	descProcesses    = newDesc("processes", "riverbus processes whose report has not expired, by state: live, or stale (no report for 3 report intervals: killed, or cannot write to the database).", "state")
	descRecentErrors = newDesc("recent_errors", "Failures of an operation (a horizon round, a pool's batch, River's completer, ...) in the current run of failures, summed over the processes that report them; a run ends 5 minutes after its last failure.", "operation", "subject")
	descRecentErrAge = newDesc("recent_error_age_seconds", "Seconds since the last failure of an operation in any reporting process (by the database's clock, as of the process's last report).", "operation", "subject")

	allDescs = []*prometheus.Desc{
		descUp, descScrapeDuration, descStateReads,
		descHorizon, descHorizonAge, descLastSequence, descLastCommitted, descOpenGaps, descWatchedSkipped, descGapsProvenDead, descGapsSkipped, descLateEvents, descHorizonProblem,
		descFailovers, descLastFailover,
		descRetentionTrimmed, descRetentionEvents, descRetentionEnabled, descRetentionKeep, descOldestEventAge,
		descPoolCursor, descPoolCheckpoint, descPoolLag, descPoolFannedOut, descPoolLate, descPoolJobs, descPoolDead, descPoolUndeliv, descPoolPaused, descPoolAhead,
		descPoolHeld, descPoolHolderTry, descPoolSlots, descPoolRunAbove,
		descProcesses, descRecentErrors, descRecentErrAge,
	}
)

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// CollectorOpts are the optional settings of NewCollector.
type CollectorOpts struct {
	// Timeout bounds the queries of one scrape. Zero means TimeoutDefault.
	Timeout time.Duration
	// MaxAge is how old a read of the database a scrape may be served: a
	// flood of scrapes makes at most one read per MaxAge, one at a time,
	// whatever their number. Zero means MaxAgeDefault; -1 reads at every
	// scrape (still one at a time).
	MaxAge time.Duration
	// Logger receives the errors of failed scrapes. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Collector is a prometheus.Collector that reads riverbus's horizon, pools
// and their jobs from the database, at most once per MaxAge and one read at
// a time. See the package documentation for the metrics. It is safe for
// concurrent scrapes.
type Collector struct {
	client  *riverbus.Client
	timeout time.Duration
	maxAge  time.Duration
	logger  *slog.Logger

	mu       sync.Mutex // held through a read: concurrent scrapes wait and share it
	last     *riverbus.Status
	lastErr  error
	lastAt   time.Time
	lastTook time.Duration
	reads    int64
}

// NewCollector returns a Collector for db; opts may be nil. It does not
// touch the database. It panics when db is nil.
func NewCollector(db *pgxpool.Pool, opts *CollectorOpts) *Collector {
	if db == nil {
		panic("metrics.NewCollector: db is nil")
	}
	if opts == nil {
		opts = &CollectorOpts{}
	}
	// A client with nothing to run: only its status snapshot is used.
	client, err := riverbus.NewClient(db, &riverbus.Config{FanoutDisabled: true})
	if err != nil {
		panic("metrics.NewCollector: " + err.Error())
	}
	c := &Collector{client: client, timeout: opts.Timeout, maxAge: opts.MaxAge, logger: opts.Logger}
	if c.timeout <= 0 {
		c.timeout = TimeoutDefault
	}
	if c.maxAge == 0 {
		c.maxAge = MaxAgeDefault
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c
}

// Describe sends the descriptions of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads the database and sends the metrics. When the read fails it
// sends riverbus_up 0 (and the scrape duration) only, and logs the error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, took, reads, err := c.snapshot()
	emit(ch, descScrapeDuration, prometheus.GaugeValue, took.Seconds())
	emit(ch, descStateReads, prometheus.CounterValue, float64(reads))
	if err != nil {
		emit(ch, descUp, prometheus.GaugeValue, 0)
		return
	}
	emit(ch, descUp, prometheus.GaugeValue, 1)

	emit(ch, descHorizon, prometheus.GaugeValue, float64(s.Horizon))
	emit(ch, descHorizonAge, prometheus.GaugeValue, s.HorizonAgeSeconds)
	emit(ch, descLastSequence, prometheus.GaugeValue, float64(s.LastSequence))
	emit(ch, descLastCommitted, prometheus.GaugeValue, float64(s.LastCommitted))
	emit(ch, descOpenGaps, prometheus.GaugeValue, float64(s.OpenGaps))
	emit(ch, descWatchedSkipped, prometheus.GaugeValue, float64(s.WatchedSkipped))
	emit(ch, descGapsProvenDead, prometheus.CounterValue, float64(s.GapsProvenDead))
	emit(ch, descGapsSkipped, prometheus.CounterValue, float64(s.GapsSkipped))
	emit(ch, descLateEvents, prometheus.CounterValue, float64(s.LateEvents))
	emit(ch, descFailovers, prometheus.CounterValue, float64(s.Failovers))
	lastFailover := 0.0
	if s.LastFailover != nil {
		lastFailover = float64(s.LastFailover.At.UnixNano()) / 1e9
	}
	emit(ch, descLastFailover, prometheus.GaugeValue, lastFailover)
	emit(ch, descRetentionTrimmed, prometheus.GaugeValue, float64(s.RetentionTrimmedThrough))
	emit(ch, descRetentionEvents, prometheus.CounterValue, float64(s.RetentionEventsTrimmed))
	emit(ch, descRetentionEnabled, prometheus.GaugeValue, boolValue(s.RetentionEnabled))
	emit(ch, descRetentionKeep, prometheus.GaugeValue, s.RetentionKeepSeconds)
	emit(ch, descOldestEventAge, prometheus.GaugeValue, s.OldestEventAgeSeconds)
	// Every problem, 0 included, so an alert's series never vanishes.
	for _, code := range horizon.ProblemCodes {
		v, blocks := 0.0, horizon.ProblemBlocks(code)
		for _, p := range s.Problems {
			if p.Code == code {
				v = 1
			}
		}
		emit(ch, descHorizonProblem, prometheus.GaugeValue, v, code, strconv.FormatBool(blocks))
	}
	collectProcesses(ch, s)

	for _, p := range s.Pools {
		emit(ch, descPoolCursor, prometheus.GaugeValue, float64(p.Cursor), p.Name)
		emit(ch, descPoolCheckpoint, prometheus.GaugeValue, float64(p.Checkpoint), p.Name)
		emit(ch, descPoolLag, prometheus.GaugeValue, float64(p.Lag), p.Name)
		emit(ch, descPoolFannedOut, prometheus.CounterValue, float64(p.EventsFannedOut), p.Name)
		emit(ch, descPoolLate, prometheus.CounterValue, float64(p.LateEventsDelivered), p.Name)
		emit(ch, descPoolDead, prometheus.GaugeValue, float64(p.DeadLetters), p.Name)
		emit(ch, descPoolUndeliv, prometheus.GaugeValue, float64(p.UndeliverableDeadLetters), p.Name)
		paused := 0.0
		if p.Status == bustype.PoolPaused {
			paused = 1
		}
		emit(ch, descPoolPaused, prometheus.GaugeValue, paused, p.Name)
		emit(ch, descPoolAhead, prometheus.GaugeValue, float64(p.AheadOfLog), p.Name)
		held, attempts := 0.0, 0
		if p.Holder != nil {
			held, attempts = p.Holder.HeldFor().Seconds(), p.Holder.Attempt
		}
		emit(ch, descPoolHeld, prometheus.GaugeValue, held, p.Name)
		emit(ch, descPoolHolderTry, prometheus.GaugeValue, float64(attempts), p.Name)
		emit(ch, descPoolSlots, prometheus.GaugeValue, float64(p.WorkerSlots), p.Name)
		emit(ch, descPoolRunAbove, prometheus.GaugeValue, float64(p.RunningAboveWorkers), p.Name)

		// Every River state, zero included, so a series never vanishes.
		for _, state := range bustype.JobStates() {
			emit(ch, descPoolJobs, prometheus.GaugeValue, float64(p.Jobs[state]), p.Name, string(state))
		}
		for state, n := range p.Jobs {
			if !slices.Contains(bustype.JobStates(), state) { // a state newer than this River version
				emit(ch, descPoolJobs, prometheus.GaugeValue, float64(n), p.Name, string(state))
			}
		}
	}
}

// collectProcesses sends the processes' figures: how many are live and
// stale (both, 0 included, so an alert's series never vanishes), and per
// failing operation the failures and the age of the last, over every
// process that reports it.
func collectProcesses(ch chan<- prometheus.Metric, s *riverbus.Status) {
	live, stale := 0, 0
	type key struct{ op, subject string }
	count := map[key]int64{}
	age := map[key]float64{}
	for _, p := range s.Processes {
		if p.Stale {
			stale++
		} else {
			live++
		}
		for _, e := range p.Errors {
			k := key{e.Operation, e.Subject}
			if a, seen := age[k]; !seen || e.LastAgeSeconds < a {
				age[k] = e.LastAgeSeconds
			}
			count[k] += e.Count
		}
	}
	emit(ch, descProcesses, prometheus.GaugeValue, float64(live), "live")
	emit(ch, descProcesses, prometheus.GaugeValue, float64(stale), "stale")
	for k, n := range count {
		emit(ch, descRecentErrors, prometheus.GaugeValue, float64(n), k.op, k.subject)
		emit(ch, descRecentErrAge, prometheus.GaugeValue, age[k], k.op, k.subject)
	}
}

// snapshot returns the last read of the database when it is younger than
// MaxAge, else reads it again (a failure is kept as long, so a flood of
// scrapes against a database that is down costs one attempt per MaxAge).
func (c *Collector) snapshot() (*riverbus.Status, time.Duration, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxAge > 0 && c.reads > 0 && time.Since(c.lastAt) < c.maxAge {
		return c.last, c.lastTook, c.reads, c.lastErr
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.last, c.lastErr = c.client.Status(ctx)
	c.lastAt, c.lastTook = time.Now(), time.Since(start)
	c.reads++
	if c.lastErr != nil {
		c.logger.Error("metrics: read riverbus state", "err", c.lastErr)
	}
	return c.last, c.lastTook, c.reads, c.lastErr
}

// emit sends one constant metric. A metric that cannot be built (a label
// value that is not UTF-8, say) is sent as an invalid metric, which the
// registry reports, rather than panicking.
func emit(ch chan<- prometheus.Metric, desc *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(desc, typ, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(desc, err)
	}
	ch <- m
}

// NewRegistry returns a registry with a Collector for db (opts may be nil),
// the fan-out's histograms of this process (fanout.RoundSeconds,
// fanout.BatchSeconds: empty in a process that runs no fan-out), its
// failure counter (health.ErrorsTotal), and the Go runtime and process
// collectors.
func NewRegistry(db *pgxpool.Pool, opts *CollectorOpts) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(db, opts),
		fanout.RoundSeconds,
		fanout.BatchSeconds,
		health.ErrorsTotal,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// NewProcessRegistry returns a registry of what one process measures
// itself, without the database-wide figures of NewRegistry: the fan-out's
// histograms (fanout.RoundSeconds, fanout.BatchSeconds), its failures
// (health.ErrorsTotal, counted also while the database refuses its
// report), Go's runtime and the process. riverbus fanout and work serve it, so each of many such
// processes can be scraped without a query to the database, and without
// every one of them repeating the pools' figures.
func NewProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		fanout.RoundSeconds,
		fanout.BatchSeconds,
		health.ErrorsTotal,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler serves the metrics of reg in the Prometheus exposition format,
// along with promhttp's own request counters. Mount it at /metrics.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg,
		// The Collector reports its own failures as riverbus_up 0; keep
		// serving the rest when anything else fails.
		ErrorHandling: promhttp.ContinueOnError,
	}))
}

// boolValue is 1 for true, 0 for false.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
