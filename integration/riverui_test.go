package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/internal/ui"
	"github.com/riverbus/riverbus/workers"
)

// What River UI's buttons and River's client API do to ordered pools'
// jobs. Every test runs twice: through River UI's HTTP API, served by the
// handler `riverbus run` serves (internal/ui), and through River's client
// (JobRetry, JobCancel, JobDelete).

// jobActions are retry, cancel and delete of one job; each returns the
// error the UI or the client gave.
type jobActions struct {
	name                string
	retry, cancel, del  func(id int64) error
	runningDeleteRefuse func(err error) bool
}

// uiActions posts to River UI's API, as its buttons do: POST
// /api/jobs/{retry,cancel,delete} with {"ids": ["<id>", ...]}.
func uiActions(t *testing.T, db *pgxpool.Pool) jobActions {
	t.Helper()
	h, err := ui.NewHandler(t.Context(), db, ui.Opts{Logger: discardLogger()})
	require.NoError(t, err)
	require.NoError(t, h.Start(t.Context()))
	t.Cleanup(h.Stop)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(action string) func(int64) error {
		return func(id int64) error {
			body, err := json.Marshal(map[string][]string{"ids": {strconv.FormatInt(id, 10)}})
			if err != nil {
				return err
			}
			return riverUIRequest(t.Context(), http.MethodPost, srv.URL+"/api/jobs/"+action, string(body))
		}
	}
	return jobActions{
		name: "RiverUI", retry: post("retry"), cancel: post("cancel"), del: post("delete"),
		runningDeleteRefuse: func(err error) bool {
			return err != nil && bytes.Contains([]byte(err.Error()), []byte(": 400 "))
		},
	}
}

// clientActions use an insert-only River client, as an application would.
func clientActions(t *testing.T, db *pgxpool.Pool) jobActions {
	t.Helper()
	client, err := river.NewClient(workers.NewDriver(db, discardLogger()), &river.Config{Logger: discardLogger()})
	require.NoError(t, err)
	ctx := t.Context()
	return jobActions{
		name:                "Client",
		retry:               func(id int64) error { _, err := client.JobRetry(ctx, id); return err },
		cancel:              func(id int64) error { _, err := client.JobCancel(ctx, id); return err },
		del:                 func(id int64) error { _, err := client.JobDelete(ctx, id); return err },
		runningDeleteRefuse: func(err error) bool { return errors.Is(err, rivertype.ErrJobRunning) },
	}
}

// forEachActions runs test once with River UI's API and once with River's
// client.
func forEachActions(t *testing.T, test func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions)) {
	t.Run("RiverUI", func(t *testing.T) { t.Parallel(); test(t, uiActions) })
	t.Run("Client", func(t *testing.T) { t.Parallel(); test(t, clientActions) })
}

// jobOf returns the id of the newest job of the ordered pool for seq.
func jobOf(t *testing.T, db *pgxpool.Pool, seq int64) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(t.Context(), `SELECT id FROM river_job
		WHERE kind = $1 AND (args->>'global_sequence')::bigint = $2 ORDER BY id DESC LIMIT 1`, orderedPoolName, seq).Scan(&id))
	return id
}

// stateOf returns the state of the newest job for seq, "" when there is
// none.
func stateOf(t *testing.T, db *pgxpool.Pool, seq int64) string {
	t.Helper()
	var state string
	err := db.QueryRow(t.Context(), `SELECT coalesce(max(state::text) FILTER (WHERE id = (SELECT max(id) FROM river_job
			WHERE kind = $1 AND (args->>'global_sequence')::bigint = $2)), '')
		FROM river_job WHERE kind = $1 AND (args->>'global_sequence')::bigint = $2`, orderedPoolName, seq).Scan(&state)
	require.NoError(t, err)
	return state
}

// mostInFlight returns the most jobs one lane of the ordered pool has out
// of `pending` and unfinished, as one snapshot sees them.
func mostInFlight(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT coalesce(max(c), 0) FROM (
		SELECT count(*) AS c FROM river_job WHERE kind = $1 AND metadata ? 'riverbus_lane'
			AND state IN ('available', 'running', 'retryable', 'scheduled')
		GROUP BY metadata->>'riverbus_lane') s`, orderedPoolName).Scan(&n))
	return n
}

func countState(t *testing.T, db *pgxpool.Pool, state string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = $1 AND state = $2::river_job_state`,
		orderedPoolName, state).Scan(&n))
	return n
}

func deadLetterCount(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	dls, err := operator(t, db).DeadLetterList(t.Context(), bustype.DeadLetterListParams{Pool: orderedPoolName})
	require.NoError(t, err)
	return len(dls)
}

// gates hands out a channel per sequence that holds the job running until
// opened.
type gates struct {
	mu sync.Mutex
	m  map[int64]chan struct{}
}

func newGates(seqs ...int64) *gates {
	g := &gates{m: map[int64]chan struct{}{}}
	for _, s := range seqs {
		g.m[s] = make(chan struct{})
	}
	return g
}

// openAll opens the gates still closed: a test registers it as a cleanup
// after setupOrdered, so that it runs before the River client stops.
func (g *gates) openAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.m {
		select {
		case <-c:
		default:
			close(c)
		}
	}
}

// hold is the recorder's hold func: the first attempt of a gated sequence
// waits.
func (g *gates) hold(seq int64, attempt int) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if attempt > 1 {
		return nil
	}
	return g.m[seq]
}

func (g *gates) open(seq int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.m[seq])
}

// setupBlockedKey runs a key-ordered pool that blocks on dead letters, with
// key "k" of three events whose first is a dead letter (while poison holds
// its sequence) and holds the two others pending.
func setupBlockedKey(t *testing.T) (rec *recorder, b *orderedBundle, poison *atomic.Int64, k []int64) {
	t.Helper()
	poison = new(atomic.Int64)
	poison.Store(1)
	rec = &recorder{fail: func(seq int64, _ int) bool { return seq == poison.Load() }}
	b = setupOrdered(t, bustype.PoolParams{Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterBlock, MaxAttempts: 1}, 10, rec)
	k = appendKeyed(t, b.db, "k", 3)
	require.Equal(t, int64(1), k[0])
	testwait.Eventually(t, 30*time.Second, func() bool {
		return deadLetterCount(t, b.db) == 1 && countState(t, b.db, "pending") == 2
	}, "a dead letter holding two pending events")
	return rec, b, poison, k
}

// Block mode: retrying the dead letter from River UI (or JobRetry) runs it
// and then the key's held events, in order. Before migration 009 the old
// riverbus_dead_letter row kept blocking the key: its later events stayed
// pending forever.
func TestRiverUIRetryOfBlockingDeadLetterReleasesTheKey(t *testing.T) {
	t.Parallel()
	forEachActions(t, func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions) {
		rec, b, poison, k := setupBlockedKey(t)
		act := newActions(t, b.db)

		poison.Store(0) // the handler is fixed
		require.NoError(t, act.retry(jobOf(t, b.db, k[0])))

		testwait.Eventually(t, 30*time.Second, func() bool { _, bk := rec.snapshot(); return len(bk["k"]) == 3 }, "the key's three events done")
		_, byKey := rec.snapshot()
		require.Equal(t, k, byKey["k"], "the retried event first, then the held ones in order")
		require.Zero(t, deadLetterCount(t, b.db), "a dead letter put back to work is no longer one")
		require.Equal(t, 1, rec.maxKey)
		require.Zero(t, countState(t, b.db, "pending"))
	})
}

// Release mode: a dead letter retried while its key has a job running waits
// for it (pending), then runs before the key's later events. Before 009 it
// became available at once: two jobs of one key in flight.
func TestRiverUIRetryOfDeadLetterWaitsForTheKey(t *testing.T) {
	t.Parallel()
	forEachActions(t, func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions) {
		var poison atomic.Int64
		poison.Store(1)
		g := newGates(2)
		rec := &recorder{fail: func(seq int64, _ int) bool { return seq == poison.Load() }, hold: g.hold}
		b := setupOrdered(t, bustype.PoolParams{Ordering: bustype.OrderingKey, MaxAttempts: 1}, 10, rec)
		t.Cleanup(g.openAll)
		act := newActions(t, b.db)
		k := appendKeyed(t, b.db, "k", 3)
		require.Equal(t, []int64{1, 2, 3}, k)
		testwait.Eventually(t, 30*time.Second, func() bool {
			return deadLetterCount(t, b.db) == 1 && rec.hasStarted(k[1])
		}, "the dead letter and its successor running")

		poison.Store(0)
		require.NoError(t, act.retry(jobOf(t, b.db, k[0])))
		require.Equal(t, "pending", stateOf(t, b.db, k[0]), "the retried dead letter waits for the key's running job")
		require.Equal(t, 1, mostInFlight(t, b.db))
		require.Zero(t, deadLetterCount(t, b.db))

		g.open(k[1])
		testwait.Eventually(t, 30*time.Second, func() bool { _, bk := rec.snapshot(); return len(bk["k"]) == 3 }, "the key's three events done")
		_, byKey := rec.snapshot()
		require.Equal(t, []int64{k[1], k[0], k[2]}, byKey["k"], "the retry goes next in its key")
		require.Equal(t, 1, rec.maxKey)
	})
}

// Retry of a pending job does not let it jump its key; retry of a completed
// or cancelled job puts it back in line behind the key's job in flight.
// Before 009 each became available at once.
func TestRiverUIRetryKeepsTheKeyInLine(t *testing.T) {
	t.Parallel()
	forEachActions(t, func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions) {
		g := newGates(2)
		rec := &recorder{hold: g.hold}
		b := setupOrdered(t, bustype.PoolParams{Ordering: bustype.OrderingKey}, 10, rec)
		t.Cleanup(g.openAll)
		act := newActions(t, b.db)
		k := appendKeyed(t, b.db, "k", 4)
		require.Equal(t, []int64{1, 2, 3, 4}, k)
		testwait.Eventually(t, 30*time.Second, func() bool {
			return rec.hasStarted(k[1]) && countState(t, b.db, "pending") == 2
		}, "the first done, the second running, two pending")

		require.NoError(t, act.cancel(jobOf(t, b.db, k[3])), "cancel of a pending job")
		require.Equal(t, "cancelled", stateOf(t, b.db, k[3]))
		require.NoError(t, act.retry(jobOf(t, b.db, k[2])), "retry of a pending job")
		require.Equal(t, "pending", stateOf(t, b.db, k[2]))
		require.NoError(t, act.retry(jobOf(t, b.db, k[0])), "retry of a completed job")
		require.Equal(t, "pending", stateOf(t, b.db, k[0]))
		require.NoError(t, act.retry(jobOf(t, b.db, k[3])), "retry of a cancelled job")
		require.Equal(t, "pending", stateOf(t, b.db, k[3]))
		require.Equal(t, 1, mostInFlight(t, b.db))
		// River does not retry a running job.
		require.NoError(t, act.retry(jobOf(t, b.db, k[1])))
		require.Equal(t, "running", stateOf(t, b.db, k[1]))

		g.open(k[1])
		testwait.Eventually(t, 30*time.Second, func() bool { d, _ := rec.snapshot(); return len(d) == 5 }, "five completions")
		_, byKey := rec.snapshot()
		require.Equal(t, []int64{k[0], k[1], k[0], k[2], k[3]}, byKey["k"], "released lowest sequence first")
		require.Equal(t, 1, rec.maxKey)
		require.Zero(t, countState(t, b.db, "pending"))
	})
}

// Cancel and delete release the key, whichever of its jobs they hit:
// running (cancel), retrying, pending; a running job cannot be deleted.
func TestRiverUICancelAndDeleteReleaseTheKey(t *testing.T) {
	t.Parallel()
	forEachActions(t, func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions) {
		g := newGates(1)
		// 2 and 5 fail their first attempt and would retry in an hour: they
		// hold the key as retryable jobs.
		rec := &recorder{
			hold: g.hold,
			fail: func(seq int64, attempt int) bool { return (seq == 2 || seq == 5) && attempt == 1 },
			retryIn: func(seq int64) time.Duration {
				if seq == 2 || seq == 5 {
					return time.Hour
				}
				return 0
			},
		}
		b := setupOrdered(t, bustype.PoolParams{Ordering: bustype.OrderingKey, MaxAttempts: 5}, 10, rec)
		t.Cleanup(g.openAll)
		act := newActions(t, b.db)
		k := appendKeyed(t, b.db, "k", 6)
		require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, k)

		testwait.Eventually(t, 30*time.Second, func() bool { return rec.hasStarted(k[0]) }, "1 running")
		require.True(t, act.runningDeleteRefuse(act.del(jobOf(t, b.db, k[0]))), "a running job is not deleted")
		require.NoError(t, act.cancel(jobOf(t, b.db, k[0])), "cancel of a running job")
		testwait.Eventually(t, 30*time.Second, func() bool {
			return stateOf(t, b.db, k[0]) == "cancelled" && stateOf(t, b.db, k[1]) == "retryable"
		}, "2 retrying in an hour")
		require.NoError(t, act.del(jobOf(t, b.db, k[2])), "delete of a pending job")
		require.NoError(t, act.cancel(jobOf(t, b.db, k[3])), "cancel of a pending job")
		require.Equal(t, 1, mostInFlight(t, b.db))
		require.NoError(t, act.del(jobOf(t, b.db, k[1])), "delete of a retrying job")
		testwait.Eventually(t, 30*time.Second, func() bool { return stateOf(t, b.db, k[4]) == "retryable" }, "5 retrying in an hour")
		require.NoError(t, act.cancel(jobOf(t, b.db, k[4])), "cancel of a retrying job")
		testwait.Eventually(t, 30*time.Second, func() bool { _, bk := rec.snapshot(); return len(bk["k"]) == 1 }, "6 done")

		_, byKey := rec.snapshot()
		require.Equal(t, []int64{k[5]}, byKey["k"])
		require.Equal(t, 1, rec.maxKey)
		require.Equal(t, "", stateOf(t, b.db, k[1]))
		require.Equal(t, "", stateOf(t, b.db, k[2]))
		require.Zero(t, countState(t, b.db, "pending"))
	})
}

// Block mode: deleting a dead letter's job from River UI does not give the
// dead letter up (River's cleaner deletes discarded jobs the same way, and
// dead letters outlive it): it still holds its key until `dlq retry`
// (which re-inserts it) or `dlq purge`.
func TestRiverUIDeleteOfBlockingDeadLetterKeepsIt(t *testing.T) {
	t.Parallel()
	for _, then := range []string{"retry", "purge"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel()
			forEachActions(t, func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions) {
				ctx := t.Context()
				rec, b, poison, k := setupBlockedKey(t)
				act := newActions(t, b.db)
				dead := jobOf(t, b.db, k[0])
				require.NoError(t, act.del(dead))
				require.Equal(t, "", stateOf(t, b.db, k[0]))
				dls, err := operator(t, b.db).DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: orderedPoolName})
				require.NoError(t, err)
				require.Len(t, dls, 1)
				require.False(t, dls[0].JobExists)
				require.Equal(t, 2, countState(t, b.db, "pending"), "the key is still held")

				poison.Store(0)
				if then == "retry" {
					res, err := operator(t, b.db).DeadLetterRetry(ctx, dead)
					require.NoError(t, err)
					require.Equal(t, bustype.RetryReinserted, res.Action)
					testwait.Eventually(t, 30*time.Second, func() bool { _, bk := rec.snapshot(); return len(bk["k"]) == 3 }, "the key's three events done")
					_, byKey := rec.snapshot()
					require.Equal(t, k, byKey["k"])
				} else {
					require.NoError(t, operator(t, b.db).DeadLetterPurge(ctx, dead))
					testwait.Eventually(t, 30*time.Second, func() bool { _, bk := rec.snapshot(); return len(bk["k"]) == 2 }, "the key's later events done")
					_, byKey := rec.snapshot()
					require.Equal(t, k[1:], byKey["k"])
				}
				require.Zero(t, deadLetterCount(t, b.db))
				require.Zero(t, countState(t, b.db, "pending"))
			})
		})
	}
}

// An operator clicking around River UI while a block-mode pool works:
// retries, cancels and deletes of whatever jobs are there, then every dead
// letter retried. No key is held forever, no key ever has two jobs in
// flight, and each key's completed events are in sequence order.
func TestRiverUIOperatorNeverHoldsAKey(t *testing.T) {
	t.Parallel()
	forEachActions(t, func(t *testing.T, newActions func(*testing.T, *pgxpool.Pool) jobActions) {
		ctx := t.Context()
		// Every fifth event fails its first attempt; with one attempt
		// allowed it becomes a dead letter and holds its key.
		rec := &recorder{delay: 30 * time.Millisecond, fail: func(seq int64, attempt int) bool { return seq%5 == 0 && attempt == 1 }}
		b := setupOrdered(t, bustype.PoolParams{Ordering: bustype.OrderingKey, OnDeadLetter: bustype.DeadLetterBlock, MaxAttempts: 1}, 10, rec)
		act := newActions(t, b.db)
		const keys, perKey = 6, 15
		seqKey := map[int64]string{}
		for range perKey {
			for j := range keys {
				key := fmt.Sprintf("k%d", j)
				seqKey[appendKeyed(t, b.db, key, 1)[0]] = key
			}
		}

		testwait.Eventually(t, 30*time.Second, func() bool { return deadLetterCount(t, b.db) > 0 }, "a dead letter")
		rng := rand.New(rand.NewPCG(1, 2))
		worst := 0
		done := map[string]int{} // "action state": how many the UI or client accepted
		for range 60 {
			// Retrying a finished job delivers it again, after its key's
			// later events maybe: the order check below is about first
			// deliveries, so completed and cancelled jobs are left alone.
			rows, err := b.db.Query(ctx, `SELECT id, state::text FROM river_job WHERE kind = $1
				AND state NOT IN ('completed', 'cancelled') ORDER BY id`, orderedPoolName)
			require.NoError(t, err)
			type job struct {
				id    int64
				state string
			}
			var jobs []job
			for rows.Next() {
				var j job
				require.NoError(t, rows.Scan(&j.id, &j.state))
				jobs = append(jobs, j)
			}
			require.NoError(t, rows.Err())
			if len(jobs) == 0 {
				break
			}
			j := jobs[rng.IntN(len(jobs))]
			if rng.IntN(3) == 0 { // a dead letter, when there is one
				for _, d := range jobs {
					if d.state == "discarded" {
						j = d
						break
					}
				}
			}
			var op string
			var err2 error
			switch {
			case rng.IntN(4) == 0:
				op, err2 = "cancel", act.cancel(j.id)
			case rng.IntN(4) == 0 && j.state != "discarded":
				op, err2 = "delete", act.del(j.id) // a running job is refused
			default:
				op, err2 = "retry", act.retry(j.id)
			}
			if err2 == nil {
				done[op+" "+j.state]++
			}
			worst = max(worst, mostInFlight(t, b.db))
		}

		// The operator retries every dead letter until none is left. A
		// timeout names the jobs left (lane, state, attempt) and the dead
		// letters, so a key held forever shows which and why.
		var left struct{ DeadLetters, Unfinished string }
		testwait.Eventually(t, 60*time.Second, func() bool {
			dls, err := operator(t, b.db).DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: orderedPoolName})
			require.NoError(t, err)
			for _, d := range dls {
				_ = act.retry(d.JobID)
			}
			left.DeadLetters = fmt.Sprint(len(dls))
			require.NoError(t, b.db.QueryRow(ctx, `SELECT coalesce(string_agg(format('job %s lane %s %s attempt %s/%s', id,
				metadata->>'riverbus_lane', state, attempt, max_attempts), '; ' ORDER BY id), '')
				FROM river_job WHERE kind = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')`, orderedPoolName).Scan(&left.Unfinished))
			worst = max(worst, mostInFlight(t, b.db))
			return len(dls) == 0 && left.Unfinished == ""
		}, "every job finished and no dead letter left (left: %+v)", &left)
		t.Logf("actions done, by the job's state: %v", done)
		require.Equal(t, 1, worst, "never two jobs of one key in flight")
		require.Equal(t, 1, rec.maxKey)
		_, byKey := rec.snapshot()
		for key, seqs := range byKey {
			var firsts []int64
			seen := map[int64]bool{}
			for _, s := range seqs {
				require.Equal(t, key, seqKey[s])
				if !seen[s] {
					seen[s] = true
					firsts = append(firsts, s)
				}
			}
			require.IsIncreasing(t, firsts, "key %s delivered in order", key)
		}
	})
}

// startRun starts `riverbus run` on dbURL with River UI on a free loopback
// port (and the variables env) and returns River UI's URL, without the
// trailing slash, once the banner shows it.
func startRun(t *testing.T, dbURL string, env ...string) string {
	t.Helper()
	run := start(t, dbURL, "riverbus", append([]string{"RIVERBUS_UI_ADDR=127.0.0.1:0", "RIVERBUS_LOG_LEVEL=warn"}, env...), "run")
	run.waitOutput("Ctrl-C stops it.", 60*time.Second)
	m := regexp.MustCompile(`River UI:\s+(\S+)`).FindStringSubmatch(run.out.String())
	require.NotNil(t, m, run.out.String())
	return strings.TrimSuffix(m[1], "/")
}

// The same through the processes a user runs: `riverbus run` fans out and
// serves River UI, testworker works the pool; the dead letter blocking a
// key is retried by a POST to the UI's API, and the key's held events
// follow in order. Before migration 009 they stayed pending forever.
func TestRiverUIRetryServedByRunProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "blocked", Ordering: bustype.OrderingKey,
		OnDeadLetter: bustype.DeadLetterBlock, MaxAttempts: 1})
	require.NoError(t, err)

	uiURL := startRun(t, dbURL, "RIVERBUS_METRICS_ADDR=127.0.0.1:0")
	// Sequence 3 fails its first attempt, its only one: a dead letter.
	w := start(t, dbURL, "testworker", nil, "-pool", "blocked", "-fail-first-attempt-every", "3")
	w.waitOutput("ready", 30*time.Second)

	seqs := appendKeyed(t, db, "k", 5)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, seqs)
	var dead int64
	testwait.Eventually(t, 30*time.Second, func() bool {
		var pending int
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(max(job_id), 0), (SELECT count(*) FROM river_job WHERE state = 'pending')
			FROM riverbus_dead_letter`).Scan(&dead, &pending))
		return dead != 0 && pending == 2
	}, "3 a dead letter, 4 and 5 held")

	body := fmt.Sprintf(`{"ids": ["%d"]}`, dead)
	resp, err := http.Post(uiURL+"/api/jobs/retry", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(msg))

	testwait.Eventually(t, 30*time.Second, func() bool {
		var unfinished int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'blocked' AND state <> 'completed'`).Scan(&unfinished))
		return unfinished == 0
	}, "every job completed")
	var order []int64
	require.NoError(t, db.QueryRow(ctx, `SELECT array_agg(sequence ORDER BY at) FROM it_attempt`).Scan(&order))
	require.Equal(t, []int64{1, 2, 3, 3, 4, 5}, order, "3's retry first, then the held events in order")
}
