package workers

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverqueue/river"
)

// Defaults of Config.
const (
	// FetchCooldownDefault is 1ms, River's minimum: River's 100ms default
	// lets a producer fetch at most ten times a second, each fetch taking at
	// most MaxWorkers jobs, which caps a process near 1k jobs/s with 100
	// workers (see BASELINE.md), and a job inserted just after a fetch waits
	// for the cooldown. At 1ms the cap is far above what the database
	// serves, and the wait is gone (commit → handler p50 fell by about 1 ms
	// at 200 jobs/s against 5ms, with drain throughput unchanged).
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

	// Logger receives River's logs. Nil: River's default, warnings and
	// errors as text on standard output.
	Logger *slog.Logger
}

// ClientOpts are the settings ClientConfig turns into a river.Config, for
// an application that runs its own River client over pool jobs instead of a
// riverbus.Client (which binds queues to pools itself). Zero fields get the
// defaults documented on Config.
type ClientOpts struct {
	// Queues maps each River queue this client works to the most jobs it
	// works from that queue at the same time (River's
	// QueueConfig.MaxWorkers, 1 to river.QueueNumWorkersMax). A pool's jobs
	// go to the pool's queue. Empty gives a client that only inserts.
	Queues map[string]int

	// Workers holds the workers of the pools' kinds. Required when Queues is
	// not empty.
	Workers *river.Workers

	FetchCooldown               time.Duration
	FetchPollInterval           time.Duration
	JobTimeout                  time.Duration
	RescueStuckJobsAfter        time.Duration
	DiscardedJobRetentionPeriod time.Duration
	Logger                      *slog.Logger
}

// ClientOpts returns the ClientOpts of c with queues and workers.
func (c Config) ClientOpts(queues map[string]int, ws *river.Workers) ClientOpts {
	return ClientOpts{Queues: queues, Workers: ws, FetchCooldown: c.FetchCooldown, FetchPollInterval: c.FetchPollInterval,
		JobTimeout: c.JobTimeout, RescueStuckJobsAfter: c.RescueStuckJobsAfter,
		DiscardedJobRetentionPeriod: c.DiscardedJobRetentionPeriod, Logger: c.Logger}
}

// ClientConfig returns the river.Config riverbus recommends for a client
// that works pool jobs, built from opts. The caller may change the result
// further (RetryPolicy, Middleware, ...) before river.NewClient. The error
// names the field of opts that is not valid.
func ClientConfig(opts ClientOpts) (*river.Config, error) {
	cfg := &river.Config{
		FetchCooldown:               opts.FetchCooldown,
		FetchPollInterval:           opts.FetchPollInterval,
		JobTimeout:                  opts.JobTimeout,
		RescueStuckJobsAfter:        opts.RescueStuckJobsAfter,
		DiscardedJobRetentionPeriod: opts.DiscardedJobRetentionPeriod,
		Logger:                      opts.Logger,
		Workers:                     opts.Workers,
	}

	switch {
	case cfg.FetchCooldown == 0:
		cfg.FetchCooldown = FetchCooldownDefault
	case cfg.FetchCooldown < river.FetchCooldownMin:
		return nil, fmt.Errorf("FetchCooldown must be at least %s, got %s", river.FetchCooldownMin, cfg.FetchCooldown)
	}
	switch {
	case cfg.FetchPollInterval == 0:
		cfg.FetchPollInterval = max(FetchPollIntervalDefault, cfg.FetchCooldown)
	case cfg.FetchPollInterval < cfg.FetchCooldown:
		return nil, fmt.Errorf("FetchPollInterval must be at least FetchCooldown (%s), got %s", cfg.FetchCooldown, cfg.FetchPollInterval)
	}

	switch {
	case cfg.JobTimeout == 0:
		cfg.JobTimeout = JobTimeoutDefault
	case cfg.JobTimeout < -1:
		return nil, fmt.Errorf("JobTimeout must be positive or -1 (no timeout), got %s", cfg.JobTimeout)
	}
	switch {
	case cfg.RescueStuckJobsAfter < 0:
		return nil, fmt.Errorf("RescueStuckJobsAfter must be positive, got %s", cfg.RescueStuckJobsAfter)
	case cfg.RescueStuckJobsAfter == 0 && cfg.JobTimeout == -1:
		cfg.RescueStuckJobsAfter = RescueStuckJobsAfterNoTimeoutDefault
	case cfg.RescueStuckJobsAfter == 0:
		cfg.RescueStuckJobsAfter = cfg.JobTimeout + RescueMarginDefault
	case cfg.RescueStuckJobsAfter <= cfg.JobTimeout:
		return nil, fmt.Errorf("RescueStuckJobsAfter must be longer than JobTimeout (%s), got %s", cfg.JobTimeout, cfg.RescueStuckJobsAfter)
	}

	switch {
	case cfg.DiscardedJobRetentionPeriod == 0:
		cfg.DiscardedJobRetentionPeriod = -1
	case cfg.DiscardedJobRetentionPeriod < -1:
		return nil, fmt.Errorf("DiscardedJobRetentionPeriod must be positive or -1 (keep forever), got %s", cfg.DiscardedJobRetentionPeriod)
	}

	if len(opts.Queues) > 0 {
		if opts.Workers == nil {
			return nil, errors.New("Workers must be set when Queues is not empty")
		}
		cfg.Queues = make(map[string]river.QueueConfig, len(opts.Queues))
		for _, queue := range slices.Sorted(maps.Keys(opts.Queues)) {
			n := opts.Queues[queue]
			if queue == "" {
				return nil, errors.New("Queues must not have an empty queue name")
			}
			if n < 1 || n > river.QueueNumWorkersMax {
				return nil, fmt.Errorf("Queues[%q] (MaxWorkers) must be between 1 and %d, got %d", queue, river.QueueNumWorkersMax, n)
			}
			cfg.Queues[queue] = river.QueueConfig{MaxWorkers: n}
		}
	}
	// Ordered pools hand a key to its next job as soon as a job succeeds.
	cfg.Middleware = append(cfg.Middleware, &lanes.Handoff{})
	return cfg, nil
}
