package workers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/internal/redact"
	"github.com/riverbus/riverbus/internal/tracing"
)

// RiverOpts are the settings RiverConfig turns into a river.Config, for
// an application that runs its own River client over pool jobs instead of a
// riverbus.Client (which binds queues to pools itself). Zero fields get the
// defaults documented on Config.
type RiverOpts struct {
	// Queues maps each River queue this client works to the most jobs it
	// works from that queue at the same time (River's
	// QueueConfig.MaxWorkers, 1 to river.QueueNumWorkersMax). A pool's jobs
	// go to the pool's queue. Empty gives a client that only inserts.
	Queues map[string]int

	// Ordered names queues of Queues that hold ordered pools. Each gets
	// lanes.OrderedSlotsFactor times its Queues figure as River slots,
	// while riverbus still runs at most the Queues figure of its handlers
	// at once: a job of an ordered pool keeps its slot until the hand-off
	// of its lane commits, and River fetches only into free slots.
	Ordered []string

	// Workers holds the workers of the pools' kinds. Required when Queues is
	// not empty.
	Workers *river.Workers

	// DB is where the pools' retry schedules are read. Nil: River's
	// default retry policy (a client that only inserts needs none).
	DB DB

	// Config holds the settings; zero fields get riverbus's defaults.
	Config
}

// RiverConfig returns the river.Config riverbus recommends for a client
// that works pool jobs, built from opts: riverbus's defaults (Config
// documents each and why), the queues, the lane hand-off middleware
// ordered pools need, the retry policy that follows each pool's retry
// schedule, middleware that masks the credentials of URLs in job errors,
// the hook that gives jobs of big events their payloads from the log, and,
// with a tracer provider, River's otelriver middleware continuing each
// event's trace. The caller may change the result further (Middleware,
// ...) before river.NewClient; a RetryPolicy of its own replaces the
// pools' schedules. The error names the field of opts that is not valid.
func RiverConfig(opts RiverOpts) (*river.Config, error) {
	cfg := &river.Config{
		FetchCooldown:               opts.FetchCooldown,
		FetchPollInterval:           opts.FetchPollInterval,
		JobTimeout:                  opts.JobTimeout,
		RescueStuckJobsAfter:        opts.RescueStuckJobsAfter,
		DiscardedJobRetentionPeriod: opts.DiscardedJobRetentionPeriod,
		CompletedJobRetentionPeriod: opts.CompletedJobRetentionPeriod,
		CancelledJobRetentionPeriod: opts.CancelledJobRetentionPeriod,
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

	switch {
	case cfg.CompletedJobRetentionPeriod == 0:
		cfg.CompletedJobRetentionPeriod = CompletedJobRetentionPeriodDefault
	case cfg.CompletedJobRetentionPeriod < -1:
		return nil, fmt.Errorf("CompletedJobRetentionPeriod must be positive or -1 (keep forever), got %s", cfg.CompletedJobRetentionPeriod)
	}
	switch {
	case cfg.CancelledJobRetentionPeriod == 0:
		cfg.CancelledJobRetentionPeriod = CancelledJobRetentionPeriodDefault
	case cfg.CancelledJobRetentionPeriod < -1:
		return nil, fmt.Errorf("CancelledJobRetentionPeriod must be positive or -1 (keep forever), got %s", cfg.CancelledJobRetentionPeriod)
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
	limits := map[string]int{}
	for _, queue := range opts.Ordered {
		n, ok := opts.Queues[queue]
		if !ok {
			return nil, fmt.Errorf("Ordered names queue %q, which is not in Queues", queue)
		}
		limits[queue] = n
		cfg.Queues[queue] = river.QueueConfig{MaxWorkers: min(n*lanes.OrderedSlotsFactor, river.QueueNumWorkersMax)}
	}
	// Traced jobs continue their event's trace, outermost so that the
	// work span covers everything else.
	if opts.TracerProvider != nil {
		cfg.Middleware = append(cfg.Middleware, tracing.Middleware(opts.TracerProvider)...)
	}
	// Ordered pools hand a key to its next job as soon as a job succeeds.
	cfg.Middleware = append(cfg.Middleware, lanes.NewHandoff(limits))

	// Failed jobs retry on their pool's schedule. The policy is made even
	// without a DB, so a bad RetryRefreshInterval is reported either way.
	policy, err := newRetryPolicy(opts.DB, &retryPolicyConfig{RefreshInterval: opts.RetryRefreshInterval, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	if opts.DB != nil {
		cfg.RetryPolicy = policy
		cfg.Middleware = append(cfg.Middleware, policy.Middleware())
	}
	// Innermost, so that River's stored errors, its logs and the work
	// span all get the masked text.
	cfg.Middleware = append(cfg.Middleware, &maskURLs{})
	// Inside every middleware, so that they see the job's args as stored
	// (heads only, for a big event) and its failure to read a payload is a
	// job error like any other: masked, retried on the pool's schedule, and
	// an ordered lane held.
	cfg.Hooks = append(cfg.Hooks, newResolvePayloads(cfg.JobTimeout, cfg.RescueStuckJobsAfter))
	return cfg, nil
}

// maskURLs is worker middleware that masks the credentials of any URL a
// handler's error quotes (redact.Text) before River stores the error in
// the job's errors, which River UI, `riverbus status` and `dlq list` show:
// Go's *url.Error quotes the whole URL it failed on, password and query
// included. errors.Is and errors.As still see the handler's error (River's
// cancel and snooze, riverbus's Retry-After).
type maskURLs struct{ river.MiddlewareDefaults }

func (*maskURLs) Work(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
	return redact.Error(doInner(ctx), redact.Text)
}
