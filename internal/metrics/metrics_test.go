package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/metrics"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
)

// syncBuffer is a log sink for tests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testBundle is what a metrics test works with.
type testBundle struct {
	db     *pgxpool.Pool // a database of its own, migrated, with no pools yet
	logger *slog.Logger  // writes into logs
	logs   *syncBuffer
}

// setup gives the test a fresh database and a logger whose output the test
// can read.
func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	logs := &syncBuffer{}
	return t.Context(), &testBundle{
		db:     pgtest.NewPool(t),
		logger: slog.New(slog.NewTextHandler(logs, nil)),
		logs:   logs,
	}
}

// scrape GETs url and returns the series in it, "name{labels}" → value as
// printed.
func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	series := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "line %q", line)
		series[line[:i]] = line[i+1:]
	}
	require.NoError(t, sc.Err())
	return series
}

// serve serves metrics.Handler(metrics.NewRegistry(bundle.db, ...)), logging
// to bundle.logger and reading the database at every scrape.
//
// The scrape's bound is a minute, not the default's seconds: on a machine
// loaded far past its cores a read outlived the default and the scrape
// answered riverbus_up 0 without the figures these tests read. The bound
// itself has tests of its own.
func serve(t *testing.T, bundle *testBundle) string {
	t.Helper()
	srv := httptest.NewServer(metrics.Handler(metrics.NewRegistry(bundle.db, &metrics.CollectorOpts{Logger: bundle.logger, MaxAge: -1, Timeout: time.Minute})))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func TestCollector(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	// a takes every event, b only type u (none), c is paused.
	for _, p := range []bustype.PoolParams{
		{Name: "pa"},
		{Name: "pb", EventTypes: []string{"u"}},
		{Name: "pc"},
	} {
		_, _, err := pools.Create(ctx, bundle.db, p)
		require.NoError(t, err)
	}
	_, _, err := pools.SetStatus(ctx, bundle.db, "pc", bustype.PoolPaused)
	require.NoError(t, err)
	for range 3 {
		_, err := bundle.db.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', 'k', '{}')`)
		require.NoError(t, err)
	}
	f, err := fanout.New(bundle.db, &fanout.Config{Logger: bundle.logger})
	require.NoError(t, err)
	_, err = f.Pass(ctx)
	require.NoError(t, err)

	// A job of another kind is not counted.
	_, err = bundle.db.Exec(ctx, `INSERT INTO river_job (kind, args, max_attempts) VALUES ('other', '{}', 1)`)
	require.NoError(t, err)

	url := serve(t, bundle)
	s := scrape(t, url)

	for series, want := range map[string]string{
		`riverbus_up`:                      "1",
		`riverbus_horizon`:                 "3",
		`riverbus_last_sequence`:           "3",
		`riverbus_last_committed_sequence`: "3",
		`riverbus_open_gaps`:               "0",
		`riverbus_watched_skipped`:         "0",
		`riverbus_gaps_proven_dead_total`:  "0",
		`riverbus_gaps_skipped_total`:      "0",
		`riverbus_late_events_total`:       "0",

		`riverbus_pool_cursor{pool="pa"}`:                      "3",
		`riverbus_pool_checkpoint{pool="pa"}`:                  "0",
		`riverbus_pool_lag{pool="pa"}`:                         "3",
		`riverbus_pool_events_fanned_out_total{pool="pa"}`:     "3",
		`riverbus_pool_late_events_delivered_total{pool="pa"}`: "0",
		`riverbus_pool_jobs{pool="pa",state="available"}`:      "3",
		`riverbus_pool_jobs{pool="pa",state="discarded"}`:      "0",
		`riverbus_pool_jobs{pool="pa",state="completed"}`:      "0",
		`riverbus_pool_dead_letters{pool="pa"}`:                "0",
		`riverbus_pool_paused{pool="pa"}`:                      "0",

		`riverbus_pool_cursor{pool="pb"}`:                  "3", // filtered out
		`riverbus_pool_lag{pool="pb"}`:                     "3",
		`riverbus_pool_events_fanned_out_total{pool="pb"}`: "0",
		`riverbus_pool_jobs{pool="pb",state="available"}`:  "0",

		`riverbus_pool_cursor{pool="pc"}`:                 "0",
		`riverbus_pool_paused{pool="pc"}`:                 "1",
		`riverbus_pool_jobs{pool="pc",state="available"}`: "0",
	} {
		require.Equal(t, want, s[series], series)
	}
	// Every River state is there, and nothing for other kinds.
	n := 0
	for series := range s {
		if strings.HasPrefix(series, `riverbus_pool_jobs{pool="pa",`) {
			n++
		}
		require.NotContains(t, series, `pool="other"`)
	}
	require.Equal(t, 8, n, "states of pool a")
	require.Contains(t, s, "go_goroutines")
	require.Contains(t, s, "process_cpu_seconds_total")

	// The first job of a fails for good: a dead letter, and the checkpoint
	// stops below it. Then the horizon counters and gap tables move.
	_, err = bundle.db.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now()
WHERE id = (SELECT min(id) FROM river_job WHERE kind = 'pa')`)
	require.NoError(t, err)
	_, err = bundle.db.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
WHERE id = (SELECT max(id) FROM river_job WHERE kind = 'pa')`)
	require.NoError(t, err)
	cp, err := checkpoint.Advance(ctx, bundle.db, "pa")
	require.NoError(t, err)
	require.Equal(t, int64(1), cp)
	_, err = bundle.db.Exec(ctx, `
UPDATE riverbus_horizon SET gaps_proven_dead = 4, gaps_skipped = 2, late_events = 1, updated_at = now() - interval '1 hour';
INSERT INTO riverbus_gap (first_sequence, last_sequence, xid_bound) VALUES (5, 6, '1');
INSERT INTO riverbus_skipped (first_sequence, last_sequence, xid_bound) VALUES (7, 7, '1');
INSERT INTO riverbus_late (sequence) VALUES (8)`)
	require.NoError(t, err)
	// An append that rolls back hands out a sequence no event commits.
	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('t', 'k', '{}')`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	s = scrape(t, url)
	age, err := strconv.ParseFloat(s[`riverbus_horizon_age_seconds`], 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, age, 3600.0, "the horizon row changed an hour ago")
	for series, want := range map[string]string{
		`riverbus_up`:                      "1",
		`riverbus_horizon`:                 "3",
		`riverbus_last_sequence`:           "4",
		`riverbus_last_committed_sequence`: "3",
		`riverbus_open_gaps`:               "1",
		`riverbus_watched_skipped`:         "1",
		`riverbus_gaps_proven_dead_total`:  "4",
		`riverbus_gaps_skipped_total`:      "2",
		`riverbus_late_events_total`:       "1",

		`riverbus_horizon_problem{blocks="true",problem="sequence_cache"}`:          "0",
		`riverbus_horizon_problem{blocks="false",problem="notify_trigger_missing"}`: "0",

		`riverbus_pool_checkpoint{pool="pa"}`:             "1",
		`riverbus_pool_lag{pool="pa"}`:                    "2",
		`riverbus_pool_jobs{pool="pa",state="available"}`: "1",
		`riverbus_pool_jobs{pool="pa",state="discarded"}`: "1",
		`riverbus_pool_jobs{pool="pa",state="completed"}`: "1",
		`riverbus_pool_dead_letters{pool="pa"}`:           "1",
		`riverbus_pool_dead_letters{pool="pb"}`:           "0",

		`riverbus_pool_checkpoint_holder_attempts{pool="pa"}`: "0", // the job of 2, not tried yet
		`riverbus_pool_checkpoint_held_seconds{pool="pb"}`:    "0", // no job
		`riverbus_pool_checkpoint_holder_attempts{pool="pb"}`: "0",
		// An ordinary dead letter, not an undeliverable event.
		`riverbus_pool_undeliverable_dead_letters{pool="pa"}`: "0",
	} {
		require.Equal(t, want, s[series], series)
	}

	// The job of 2 fails twice and waits for its third attempt: it holds
	// pa's checkpoint, and the metrics say so.
	_, err = bundle.db.Exec(ctx, `UPDATE river_job SET state = 'retryable', attempt = 2, scheduled_at = now() + interval '1 hour'
WHERE kind = 'pa' AND state = 'available'`)
	require.NoError(t, err)
	s = scrape(t, url)
	require.Equal(t, "2", s[`riverbus_pool_checkpoint_holder_attempts{pool="pa"}`])
	held, err := strconv.ParseFloat(s[`riverbus_pool_checkpoint_held_seconds{pool="pa"}`], 64)
	require.NoError(t, err)
	require.Positive(t, held)
}

func TestCollectorLint(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "pa"})
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(metrics.NewCollector(bundle.db, nil))
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestCollectorDatabaseDown(t *testing.T) {
	t.Parallel()
	_, bundle := setup(t)
	url := serve(t, bundle)
	require.Equal(t, "1", scrape(t, url)["riverbus_up"])

	bundle.db.Close()
	s := scrape(t, url)
	require.Equal(t, "0", s["riverbus_up"])
	require.NotContains(t, s, "riverbus_horizon")
	require.Contains(t, s, "go_goroutines") // the rest still served
	require.Contains(t, bundle.logs.String(), "metrics: read riverbus state")
}

func TestCollectorTimeout(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	// Hold a lock the scrape's first query waits for.
	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	_, err = tx.Exec(ctx, `LOCK TABLE riverbus_horizon IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	c := metrics.NewCollector(bundle.db, &metrics.CollectorOpts{
		Timeout: 200 * time.Millisecond,
		Logger:  bundle.logger,
	})
	start := time.Now()
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP riverbus_up 1 when the last scrape read riverbus's state from the database, 0 when it failed.
# TYPE riverbus_up gauge
riverbus_up 0
`), "riverbus_up", "riverbus_horizon"))
	require.Less(t, time.Since(start), 5*time.Second)
	require.Contains(t, bundle.logs.String(), "metrics: read riverbus state")
}

// A flood of scrapes reads the database once per MaxAge, not once per
// scrape: 100 concurrent scrapes, one read.
func TestCollectorScrapeFloodSharesOneRead(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)
	_, _, err := pools.Create(ctx, bundle.db, bustype.PoolParams{Name: "pa"})
	require.NoError(t, err)
	// The scrapes wait for the one read, which a saturated machine may slow
	// past the default timeout; what is checked is that there is one.
	srv := httptest.NewServer(metrics.Handler(metrics.NewRegistry(bundle.db, &metrics.CollectorOpts{MaxAge: time.Hour, Timeout: 2 * time.Minute})))
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	up := make(chan string, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/metrics")
			if err != nil {
				up <- err.Error()
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			up <- strings.Join(regexp.MustCompile(`(?m)^riverbus_up \S+$`).FindAllString(string(body), -1), "")
		}()
	}
	wg.Wait()
	close(up)
	for u := range up {
		require.Equal(t, "riverbus_up 1", u)
	}
	s := scrape(t, srv.URL+"/metrics")
	require.Equal(t, "1", s["riverbus_state_reads_total"])
	require.Contains(t, s, `riverbus_pool_cursor{pool="pa"}`)
}
