package workers

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	// FetchCooldownDefault is 1ms, River's minimum: River's 100ms default
	// lets a producer fetch at most ten times a second, each fetch taking at
	// most MaxWorkers jobs, which caps a process near 1k jobs/s with 100
	// workers, and a job inserted just after a fetch waits for the
	// cooldown, adding to every event's latency. At 1ms the cap is far
	// above what the database serves and the wait is negligible, while a
	// busy queue still fetches in batches, so the drain does not pay for it.
	FetchCooldownDefault = 1 * time.Millisecond

	// FetchPollIntervalDefault is 100ms, against River's 1s: new jobs
	// normally arrive by LISTEN/NOTIFY, and the poll only bounds the delay
	// when a notification is lost or LISTEN is unavailable (PgBouncer in
	// transaction mode). Ten cheap queries a second per queue is a fair price.
	FetchPollIntervalDefault = 100 * time.Millisecond

	// JobTimeoutDefault is River's: a job's context is cancelled after one
	// minute.
	JobTimeoutDefault = time.Minute

	// RescueMarginDefault is added to JobTimeout to give RescueStuckJobsAfter
	// its default: a job still running that long after it started belongs to
	// a worker that died, and River makes it available again (or discards it
	// after its last attempt). River's own default is one hour.
	RescueMarginDefault = time.Minute

	// RescueStuckJobsAfterNoTimeoutDefault is RescueStuckJobsAfter's default
	// when JobTimeout is -1 (no timeout): River's default of one hour.
	RescueStuckJobsAfterNoTimeoutDefault = time.Hour

	// CompletedJobRetentionPeriodDefault and
	// CancelledJobRetentionPeriodDefault are River's own: a finished job
	// stays in river_job (and River UI) for a day.
	CompletedJobRetentionPeriodDefault = 24 * time.Hour
	CancelledJobRetentionPeriodDefault = 24 * time.Hour

	// RetryRefreshIntervalDefault is how old a worker process's copy of
	// the pools' retry schedules may get before it reads them again: a
	// pool update reaches the retries of every worker process within it.
	RetryRefreshIntervalDefault = 10 * time.Second
)

// Config holds the River settings of a riverbus.Client's workers
// (riverbus.Config.Work). Zero fields get the defaults documented on each.
type Config struct {
	// FetchCooldown is the least time between two fetches of a queue.
	// Zero: FetchCooldownDefault (1ms). At least 1ms.
	FetchCooldown time.Duration

	// FetchPollInterval is how often a queue is fetched without a
	// notification. Zero: FetchPollIntervalDefault (100ms). At least
	// FetchCooldown.
	FetchPollInterval time.Duration

	// JobTimeout is how long a job's Work may run before its context is
	// cancelled. Zero: JobTimeoutDefault (1 minute). -1: no timeout.
	JobTimeout time.Duration

	// RescueStuckJobsAfter is how long a job may stay running before River
	// assumes its worker died and retries it. It must be longer than
	// JobTimeout, or jobs that are still working would be run twice.
	// Zero: JobTimeout + RescueMarginDefault (2 minutes by default), so a
	// crashed worker's jobs come back within minutes rather than River's
	// hour; RescueStuckJobsAfterNoTimeoutDefault when JobTimeout is -1.
	RescueStuckJobsAfter time.Duration

	// DiscardedJobRetentionPeriod is how long River's cleaner keeps
	// discarded jobs (dead letters) in river_job. Zero: -1, never delete
	// them, so they stay visible in River UI until an operator retries or
	// purges them. riverbus keeps its own copy in riverbus_dead_letter
	// either way, so a positive period is safe too.
	DiscardedJobRetentionPeriod time.Duration

	// CompletedJobRetentionPeriod is how long River's cleaner keeps
	// completed jobs in river_job. Zero: CompletedJobRetentionPeriodDefault
	// (River's 24 hours). -1: never delete them. riverbus needs no
	// finished job (checkpoints follow the unfinished ones), so this is
	// only how long River UI shows them. The cleaner runs in the River
	// client elected leader among those that work jobs.
	CompletedJobRetentionPeriod time.Duration

	// CancelledJobRetentionPeriod is how long River's cleaner keeps
	// cancelled jobs. Zero: CancelledJobRetentionPeriodDefault (River's 24
	// hours). -1: never delete them.
	CancelledJobRetentionPeriod time.Duration

	// RetryRefreshInterval is how old a worker process's copy of the pools'
	// retry schedules may get before it reads them again: a `pool update`
	// of a schedule reaches every worker process's retries within it.
	// Zero: RetryRefreshIntervalDefault (10 seconds).
	RetryRefreshInterval time.Duration

	// Logger receives River's logs. Nil: River's default, warnings and
	// errors as text on standard output.
	Logger *slog.Logger

	// TracerProvider, when set, traces the jobs worked: River's otelriver
	// middleware starts a work span for each job (river.work/POOL), a
	// child of the span that appended the job's event when the event
	// carries its trace context (see package outbox), so the handler's
	// spans continue the append's trace. Nil: no tracing, no middleware.
	TracerProvider trace.TracerProvider
}
