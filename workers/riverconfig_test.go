package workers_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/rivercontrib/otelriver"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/tracing"
	"github.com/riverbus/riverbus/workers"
)

type billingArgs struct{ workers.Args }

func (billingArgs) Kind() string { return "billing" }

func TestConfig(t *testing.T) {
	t.Parallel()

	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(_ context.Context, _ *river.Job[billingArgs]) error { return nil }))

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := workers.RiverConfig(workers.RiverOpts{Queues: map[string]int{"billing": 50, "audit": 5}, Workers: ws})
		require.NoError(t, err)
		require.Equal(t, time.Millisecond, cfg.FetchCooldown)
		require.Equal(t, 100*time.Millisecond, cfg.FetchPollInterval)
		require.Equal(t, time.Minute, cfg.JobTimeout)
		require.Equal(t, 2*time.Minute, cfg.RescueStuckJobsAfter)
		require.Equal(t, time.Duration(-1), cfg.DiscardedJobRetentionPeriod)
		require.Equal(t, 24*time.Hour, cfg.CompletedJobRetentionPeriod)
		require.Equal(t, 24*time.Hour, cfg.CancelledJobRetentionPeriod)
		require.Equal(t, map[string]river.QueueConfig{"billing": {MaxWorkers: 50}, "audit": {MaxWorkers: 5}}, cfg.Queues)
		require.Same(t, ws, cfg.Workers)
		require.Nil(t, cfg.RetryPolicy, "no DB: River's default")

		// River accepts it.
		_, err = river.NewClient(riverpgxv5.New(pgtest.NewPool(t)), cfg)
		require.NoError(t, err)
	})

	t.Run("OrderedQueuesGetMoreSlots", func(t *testing.T) {
		t.Parallel()
		cfg, err := workers.RiverConfig(workers.RiverOpts{Queues: map[string]int{"billing": 50, "audit": 6000}, Ordered: []string{"billing", "audit"}, Workers: ws})
		require.NoError(t, err)
		require.Equal(t, map[string]river.QueueConfig{"billing": {MaxWorkers: 100}, "audit": {MaxWorkers: 10_000}}, cfg.Queues)
	})

	t.Run("Overrides", func(t *testing.T) {
		t.Parallel()
		cfg, err := workers.RiverConfig(workers.RiverOpts{Config: workers.Config{FetchCooldown: 2 * time.Millisecond, FetchPollInterval: time.Second, JobTimeout: 10 * time.Second, DiscardedJobRetentionPeriod: 24 * time.Hour,
			CompletedJobRetentionPeriod: time.Hour, CancelledJobRetentionPeriod: -1}})
		require.NoError(t, err)
		require.Equal(t, 2*time.Millisecond, cfg.FetchCooldown)
		require.Equal(t, time.Second, cfg.FetchPollInterval)
		require.Equal(t, 10*time.Second, cfg.JobTimeout)
		require.Equal(t, 70*time.Second, cfg.RescueStuckJobsAfter)
		require.Equal(t, 24*time.Hour, cfg.DiscardedJobRetentionPeriod)
		require.Equal(t, time.Hour, cfg.CompletedJobRetentionPeriod)
		require.Equal(t, time.Duration(-1), cfg.CancelledJobRetentionPeriod)
		require.Nil(t, cfg.Queues, "no queues: an insert-only client")

		cfg, err = workers.RiverConfig(workers.RiverOpts{Config: workers.Config{JobTimeout: -1}})
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), cfg.JobTimeout)
		require.Equal(t, time.Hour, cfg.RescueStuckJobsAfter)

		cfg, err = workers.RiverConfig(workers.RiverOpts{Config: workers.Config{FetchCooldown: 200 * time.Millisecond}})
		require.NoError(t, err)
		require.Equal(t, 200*time.Millisecond, cfg.FetchPollInterval, "the default poll interval is never below the cooldown")
		_, err = river.NewClient(riverpgxv5.New(nil), cfg)
		require.NoError(t, err)
	})

	for _, tt := range []struct {
		name string
		opts workers.RiverOpts
		want string
	}{
		{"FetchCooldownNegative", workers.RiverOpts{Config: workers.Config{FetchCooldown: -time.Millisecond}}, "FetchCooldown must be at least 1ms, got -1ms"},
		{"FetchCooldownTooShort", workers.RiverOpts{Config: workers.Config{FetchCooldown: time.Microsecond}}, "FetchCooldown must be at least 1ms, got 1µs"},
		{"FetchPollIntervalBelowCooldown", workers.RiverOpts{Config: workers.Config{FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 2 * time.Millisecond}}, "FetchPollInterval must be at least FetchCooldown (5ms), got 2ms"},
		{"JobTimeoutNegative", workers.RiverOpts{Config: workers.Config{JobTimeout: -2 * time.Second}}, "JobTimeout must be positive or -1 (no timeout), got -2s"},
		{"RescueNegative", workers.RiverOpts{Config: workers.Config{RescueStuckJobsAfter: -time.Second}}, "RescueStuckJobsAfter must be positive, got -1s"},
		{"RescueNotAfterTimeout", workers.RiverOpts{Config: workers.Config{JobTimeout: time.Minute, RescueStuckJobsAfter: time.Minute}}, "RescueStuckJobsAfter must be longer than JobTimeout (1m0s), got 1m0s"},
		{"DiscardedRetentionNegative", workers.RiverOpts{Config: workers.Config{DiscardedJobRetentionPeriod: -time.Hour}}, "DiscardedJobRetentionPeriod must be positive or -1 (keep forever), got -1h0m0s"},
		{"CompletedRetentionNegative", workers.RiverOpts{Config: workers.Config{CompletedJobRetentionPeriod: -2}}, "CompletedJobRetentionPeriod must be positive or -1 (keep forever), got -2ns"},
		{"CancelledRetentionNegative", workers.RiverOpts{Config: workers.Config{CancelledJobRetentionPeriod: -time.Hour}}, "CancelledJobRetentionPeriod must be positive or -1 (keep forever), got -1h0m0s"},
		{"RetryRefreshNegative", workers.RiverOpts{Config: workers.Config{RetryRefreshInterval: -time.Second}}, "RetryRefreshInterval must be positive, got -1s"},
		{"QueuesWithoutWorkers", workers.RiverOpts{Queues: map[string]int{"billing": 1}}, "Workers must be set when Queues is not empty"},
		{"QueueEmptyName", workers.RiverOpts{Queues: map[string]int{"": 1}, Workers: ws}, "Queues must not have an empty queue name"},
		{"QueueZeroWorkers", workers.RiverOpts{Queues: map[string]int{"billing": 0}, Workers: ws}, `Queues["billing"] (MaxWorkers) must be between 1 and 10000, got 0`},
		{"OrderedUnknownQueue", workers.RiverOpts{Queues: map[string]int{"billing": 5}, Ordered: []string{"audit"}, Workers: ws}, `Ordered names queue "audit", which is not in Queues`},
		{"QueueTooManyWorkers", workers.RiverOpts{Queues: map[string]int{"billing": 10_001}, Workers: ws}, `Queues["billing"] (MaxWorkers) must be between 1 and 10000, got 10001`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := workers.RiverConfig(tt.opts)
			require.EqualError(t, err, tt.want)
			require.Nil(t, cfg)
		})
	}
}

// With a DB, the pools' schedules are River's retry policy, with the
// middleware that hands a handler's Retry-After to it.
func TestConfigInstallsThePoolsRetryPolicy(t *testing.T) {
	t.Parallel()
	db := pgtest.NewPool(t)
	cfg, err := workers.RiverConfig(workers.RiverOpts{DB: db})
	require.NoError(t, err)
	policy, ok := cfg.RetryPolicy.(*workers.RetryPolicy)
	require.True(t, ok, "RetryPolicy is %T", cfg.RetryPolicy)
	require.Len(t, cfg.Middleware, 3, "lane hand-off, Retry-After and masking URLs in errors")
	require.Len(t, cfg.Hooks, 1, "reading big payloads")
	_, _, err = pools.Create(context.Background(), db, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	s, ok := policy.Schedule("billing")
	require.True(t, ok)
	require.Equal(t, bustype.RetryScheduleDefault, s)
	_, err = river.NewClient(riverpgxv5.New(db), cfg)
	require.NoError(t, err)
}

// With a tracer provider, traced jobs continue their event's trace:
// tracing.Continue first, then otelriver's middleware, outside the rest.
// Without one, neither is installed.
func TestConfigInstallsTracing(t *testing.T) {
	t.Parallel()
	cfg, err := workers.RiverConfig(workers.RiverOpts{})
	require.NoError(t, err)
	for _, m := range cfg.Middleware {
		_, isContinue := m.(*tracing.Continue)
		_, isOtel := m.(*otelriver.Middleware)
		require.False(t, isContinue || isOtel, "no tracing middleware without a provider")
	}
	cfg, err = workers.RiverConfig(workers.RiverOpts{Config: workers.Config{TracerProvider: sdktrace.NewTracerProvider()}})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(cfg.Middleware), 2)
	require.IsType(t, &tracing.Continue{}, cfg.Middleware[0])
	require.IsType(t, &otelriver.Middleware{}, cfg.Middleware[1])
	_, err = river.NewClient(riverpgxv5.New(nil), cfg)
	require.NoError(t, err)
}

// A River producer takes an error ending in "conn closed" from its
// subscription for its client stopping, and returns without fetching while
// the client runs on as started: a worker process that started as the
// database restarted never worked a job. riverbus's listener words a lost
// connection otherwise while the client is not stopping, so River's Start
// fails and says why; while it stops, River's own error passes.
func TestListenerLostWhileSubscribingIsNoShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	l := workers.NewDriver(db, slog.New(slog.DiscardHandler)).GetListener(&riverdriver.GetListenenerParams{})
	require.NoError(t, l.Connect(ctx))
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	// The listener holds one of the pool's sessions: end every other one.
	_, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
	require.NoError(t, err)

	var last error
	for range 3 { // the first may report the termination itself
		if last = l.Listen(ctx, "river_insert"); last != nil && strings.Contains(last.Error(), "conn closed") {
			break
		}
	}
	require.ErrorContains(t, last, "conn closed", "the listener's connection is gone")
	require.False(t, strings.HasSuffix(last.Error(), "conn closed"), "not worded as River's shutdown: %v", last)
	require.ErrorContains(t, last, "the workers did not start")

	stopping, cancel := context.WithCancel(ctx)
	cancel()
	err = l.Listen(stopping, "river_insert")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "the workers did not start", "a client that stops gets River's own error")
}
