package integration_test

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// TestChaos's backfill: an application's existing rows turned into events
// by `riverbus backfill` beside the live traffic. A fifth of the way in, a
// throttled run starts; once a third of the rows are appended it is killed
// -9, and a run at full speed (the same command, without the rate) finishes
// the job, riding out the PostgreSQL crash if it comes then. Its keys are
// the writers' keys, so the ordered pool interleaves backfilled and live
// events of a key. Every row must become exactly one event, and every
// backfilled event is a committed event like the writers': each pool must
// handle it exactly once (the run's usual checks).
const (
	chaosBackfillName       = "chaos"
	chaosBackfillRowsPerSec = 50 // source rows per second of the run's duration
	chaosBackfillBatch      = 100
)

type chaosBackfill struct {
	rows int
	// Set by the backfill's goroutine until load.wg is done.
	mu        sync.Mutex
	kills     int
	runs      int
	finished  bool
	perSecond float64 // the last run's rows/s (at full speed)
	failure   string
}

// setUpBackfill creates the source table: the application's rows.
func (r *chaosRun) setUpBackfill() {
	r.backfill = &chaosBackfill{rows: max(1000, int(r.dur.Seconds()*chaosBackfillRowsPerSec))}
	_, err := r.db.Exec(r.ctx, `CREATE TABLE chaos_source (id bigint PRIMARY KEY, customer int NOT NULL, cents bigint NOT NULL)`)
	require.NoError(r.t, err)
	_, err = r.db.Exec(r.ctx, `INSERT INTO chaos_source SELECT i, i % $2::int, i * 7 FROM generate_series(1, $1::int) AS i`, r.backfill.rows, chaosKeys)
	require.NoError(r.t, err)
}

// chaosBackfillSummary is the rows/s a finished run prints.
var chaosBackfillSummary = regexp.MustCompile(`backfill chaos: finished: \d+ events appended, \d+ rows already there, in \S+ \((\d+) rows/s\)`)

// runBackfill is the backfill's goroutine (one of load.wg's): the
// throttled run, its kill, and the run at full speed, restarted should it
// fail, until the backfill finishes.
func (r *chaosRun) runBackfill() {
	defer r.load.wg.Done()
	b := r.backfill
	sleepCtx(r.wctx, r.dur/5)
	run := func(extra ...string) *proc {
		b.mu.Lock()
		b.runs++
		gen := b.runs
		b.mu.Unlock()
		args := append([]string{"backfill", "--type", "it.backfill", "--name", chaosBackfillName, "--batch-size", strconv.Itoa(chaosBackfillBatch), "--progress-every", "2s",
			"--query", `SELECT id, 'key-' || customer AS key, jsonb_build_object('row', id, 'cents', cents) AS data FROM chaos_source`}, extra...)
		return start(r.t, r.dbURL, "riverbus", []string{"PGAPPNAME=" + chaosAppName("backfill", gen), "RIVERBUS_LOG_LEVEL=warn"}, args...)
	}
	// At a rate that would take a third of the run for every row: killed
	// a third of the way through, it leaves most of them to the next run.
	rate := max(10, float64(b.rows)/(r.dur.Seconds()/3))
	first := run("--rate", strconv.FormatFloat(rate, 'f', 0, 64))
	for appended := int64(0); appended < int64(b.rows/3); {
		select {
		case <-first.done:
			appended = int64(b.rows) // ended by itself: nothing left to kill
		case <-time.After(200 * time.Millisecond): // poll interval of the progress row
			_ = r.db.QueryRow(r.ctx, `SELECT coalesce((SELECT rows_appended FROM riverbus_backfill WHERE name = $1), 0)`,
				chaosBackfillName).Scan(&appended) // a failed read (the crash) polls again
		}
	}
	if first.kill9() {
		b.mu.Lock()
		b.kills++
		b.mu.Unlock()
		r.t.Logf("%5.1fs kill -9 backfill (a third of its rows appended); it printed:\n%s", r.elapsed(), first.out.String())
	}
	// A run that starts while PostgreSQL is down fails at once, as the
	// command does for an operator, who runs it again: so does this loop,
	// for as long as a crash and its recovery may take.
	giveUp := time.Now().Add(3 * time.Minute)
	for attempt := 1; ; attempt++ {
		p := run()
		select {
		case <-p.done:
		case <-time.After(5 * time.Minute):
			p.kill9()
		}
		out := p.out.String()
		if p.err == nil {
			b.mu.Lock()
			b.finished = true
			if m := chaosBackfillSummary.FindStringSubmatch(out); m != nil {
				b.perSecond, _ = strconv.ParseFloat(m[1], 64)
			}
			b.mu.Unlock()
			r.t.Logf("%5.1fs backfill: %s", r.elapsed(), lastLine(out))
			return
		}
		if time.Now().After(giveUp) {
			b.mu.Lock()
			b.failure = p.describe(false)
			b.mu.Unlock()
			return
		}
		r.t.Logf("%5.1fs backfill run %d failed (%v); running it again: %s", r.elapsed(), attempt, p.err, lastLine(out))
		time.Sleep(time.Second) // the pace of an operator's retries
	}
}

// settle adds the backfilled events to the committed ones, found by the
// ids the backfill gives its rows' events.
func (b *chaosBackfill) settle(t *testing.T, r *chaosRun, committed map[int64]bool) {
	t.Helper()
	ids := make([]uuid.UUID, b.rows)
	for i := range ids {
		ids[i] = outbox.BackfillEventID(chaosBackfillName, strconv.Itoa(i+1))
	}
	addCommittedByID(t, r.ctx, r.db, ids, committed)
}

// chaosBackfillResults is what the backfill left.
type chaosBackfillResults struct {
	events, distinct, lowest, highest int64
}

// backfillResults reads the backfilled events: how many, and how many
// distinct row ids between which bounds.
func (r *chaosRun) backfillResults() chaosBackfillResults {
	var res chaosBackfillResults
	require.NoError(r.t, retryFor(10*time.Second, func() error {
		return r.db.QueryRow(r.ctx, `SELECT count(*), count(DISTINCT metadata->>'backfill_id'),
			coalesce(min((metadata->>'backfill_id')::bigint), 0), coalesce(max((metadata->>'backfill_id')::bigint), 0)
			FROM riverbus_event WHERE tags @> ARRAY[$1]`, outbox.BackfillTag(chaosBackfillName)).
			Scan(&res.events, &res.distinct, &res.lowest, &res.highest)
	}))
	return res
}

// verifyBackfill: the backfill finished after its kill, and every source
// row became exactly one event (their delivery is checked with every other
// committed event's).
func (r *chaosRun) verifyBackfill(t *testing.T, res chaosBackfillResults) {
	b := r.backfill
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.failure, "the backfill never finished")
	require.True(t, b.finished, "the backfill finished")
	require.Equal(t, 1, b.kills, "the backfill was killed once")
	n := int64(b.rows)
	require.Equal(t, chaosBackfillResults{events: n, distinct: n, lowest: 1, highest: n}, res,
		"every source row once as an event: %s", fmt.Sprint(b.rows))
}

// rowsPerSecond is the rows/s of the run that finished the backfill.
func (b *chaosBackfill) rowsPerSecond() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.perSecond
}
