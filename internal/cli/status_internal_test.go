package cli

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
)

func TestProgressBar(t *testing.T) {
	bar := progressBar(50, 100, 60) // 60 per minute: one a second
	require.Contains(t, bar, "[###############...............]")
	require.Contains(t, bar, "50.0%  50 behind  ETA 50s")
	require.Contains(t, progressBar(0, 10, 0), "ETA unknown")
	require.Contains(t, progressBar(10, 0, 0), "100.0%")

	r := &riverbus.Status{Horizon: 10_000}
	require.Empty(t, progress(r, &riverbus.StatusPool{Checkpoint: 9500, Lag: 500}, nil), "no bar when less than 1000 behind")
	require.NotEmpty(t, progress(r, &riverbus.StatusPool{Checkpoint: 10, Lag: 9990}, nil))
}

// A horizon that stands still below committed events says so, and what to
// look at; one that is only idle (nothing committed above it), or that
// changed less than checkpoint.StuckAfter ago, does not.
func TestRenderHorizonStalled(t *testing.T) {
	for _, tc := range []struct {
		committed int64
		age       float64
		stalled   bool
	}{
		{committed: 150, age: 125, stalled: true},
		{committed: 100, age: 3600},                                // idle
		{committed: 150, age: checkpoint.StuckAfter.Seconds() - 1}, // a gap held for less
	} {
		var out bytes.Buffer
		require.NoError(t, render(&out, &riverbus.Status{Horizon: 100, LastSequence: 151, LastCommitted: tc.committed, HorizonAgeSeconds: tc.age}, nil))
		require.Contains(t, out.String(), "horizon 100 (last sequence handed out 151, last committed "+strconv.FormatInt(tc.committed, 10)+")")
		if tc.stalled {
			require.Contains(t, out.String(), "HORIZON STALLED: committed events up to 150 wait above the horizon, which has not changed for 2m5s: is a fan-out running (riverbus fanout or riverbus run)?")
		} else {
			require.NotContains(t, out.String(), "STALLED", tc)
		}
	}
}

// Refresh after refresh (status --watch), a pool's bar never goes
// backwards: while its lag grows it says "falling behind" instead, and
// while a job holds its checkpoint it names the job. (The bar used to be
// drawn in every case, and shrank whenever the horizon outran the
// checkpoint, as it did in the demo's billing pool held by one retrying
// event.)
func TestProgressNeverGoesBackwards(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	retrying := &checkpoint.Holder{Job: checkpoint.Job{ID: 77, Sequence: 7001, State: "retryable", Attempt: 3, MaxAttempts: 5,
		LastError: "decode: \x1b[2Jboom"}, HeldSince: start, At: start.Add(20 * time.Second)}
	frames := []struct {
		checkpoint, horizon int64
		completed           int64
		holder              *checkpoint.Holder
		want                string
	}{
		{5000, 10_000, 600, nil, "catching up"},     // 50.0%
		{5000, 12_000, 0, nil, "falling behind"},    // 41.7% before
		{7000, 13_000, 2000, nil, "catching up"},    // 53.8%
		{7000, 15_000, 0, retrying, "held for 20s"}, // 46.7% before
		{7000, 16_000, 0, retrying, "held for 20s"}, // 43.8% before
		{12_000, 16_500, 5000, nil, "catching up"},  // 72.7%
		{15_400, 16_500, 5000, nil, "catching up"},  // 93.3%
	}
	percent := regexp.MustCompile(`([0-9.]+)%`)
	var prev *riverbus.Status
	last := -1.0
	for i, f := range frames {
		r := &riverbus.Status{At: start.Add(time.Duration(i) * 10 * time.Second), Horizon: f.horizon, Pools: []*riverbus.StatusPool{{
			Name: "billing", Checkpoint: f.checkpoint, Lag: f.horizon - f.checkpoint, CompletedLastMinute: f.completed,
			Holder: f.holder, Jobs: map[bustype.JobState]int64{},
		}}}
		var out bytes.Buffer
		require.NoError(t, render(&out, r, prev))
		text := out.String()
		require.Contains(t, text, f.want, "frame %d:\n%s", i, text)
		if m := percent.FindStringSubmatch(text); m != nil {
			p, err := strconv.ParseFloat(m[1], 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, p, last, "frame %d: the bar went backwards:\n%s", i, text)
			last = p
		}
		if f.holder != nil {
			require.Contains(t, text, `billing: checkpoint 7000 held for 20s by job 77 (event 7001, retryable, attempt 3/5, last error "decode: \x1b[2Jboom"); after attempt 5 it becomes a dead letter`)
			require.NotContains(t, text, "\x1b")
			require.Contains(t, oneLine(r), "done 0 held by job 77 (event 7001, retryable 3/5)")
		}
		prev = r
	}
	require.InDelta(t, 93.3, last, 0.01)
}

// The demo's poison invoices become dead letters within seconds: River's
// default backoff held billing's checkpoint for about 6 minutes while its
// lag grew.
func TestDemoPoisonIsADeadLetterWithinSeconds(t *testing.T) {
	require.Zero(t, demoPoisonEvery%3, "only every third demo transaction has an invoice")
	var maxAttempts int
	for _, p := range demoPools {
		if p.Name == "billing" {
			maxAttempts = p.MaxAttempts
		}
	}
	require.Positive(t, maxAttempts)
	w := &billingWorker{}
	var total time.Duration
	for attempt := 1; attempt < maxAttempts; attempt++ {
		before := time.Now()
		total += w.NextRetry(&river.Job[billingArgs]{JobRow: &rivertype.JobRow{Attempt: attempt}}).Sub(before)
	}
	require.Less(t, total, 10*time.Second, "retries before the dead letter")
}

// The one-line summary names a stuck holder after summaryHeldMin, and
// for a blocked lane, the dead letter it waits for.
func TestSummaryNamesHolder(t *testing.T) {
	lane := "customer-1"
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	blocked := &checkpoint.Holder{Job: checkpoint.Job{ID: 12, Sequence: 4, State: "pending", MaxAttempts: 2, Lane: &lane},
		LaneBlocker: &checkpoint.Job{ID: 9, Sequence: 3, State: "discarded", DeadLetter: true, Attempt: 2, MaxAttempts: 2, Lane: &lane},
		HeldSince:   since, At: since.Add(5 * time.Second)}
	require.True(t, blocked.Stuck(), "its lane waits for a dead letter")
	r := &riverbus.Status{Horizon: 10, Pools: []*riverbus.StatusPool{{Name: "ledger", Status: "active", Lag: 7, Holder: blocked}}}
	require.NotContains(t, oneLine(r), "held by", "not yet: held for 5s")
	blocked.At = since.Add(30 * time.Second)
	require.Contains(t, oneLine(r), "| ledger lag 7 done 0 held by dead letter 9 (event 3)")
}
