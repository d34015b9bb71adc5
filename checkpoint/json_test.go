package checkpoint_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
)

// A holder's JSON is the checkpoint_holder of `riverbus status --json`,
// which scripts read: these field names, in this order, the next attempt
// only for a job that waits for one. It reads back into the same holder.
func TestHolderJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lane := "customer-1"
	h := &checkpoint.Holder{
		Job: checkpoint.Job{ID: 12, Sequence: 4, State: bustype.JobStatePending, MaxAttempts: 2, Lane: &lane,
			ScheduledAt: at.Add(-time.Hour)}, // pending: no attempt to wait for
		HeldSince: at.Add(-90 * time.Second), At: at,
		LaneBlocker: &checkpoint.Job{ID: 9, Sequence: 3, State: bustype.JobStateDiscarded, DeadLetter: true, Attempt: 2, MaxAttempts: 2,
			DiscardedAt: at.Add(-time.Minute), LastError: "ledger <rejected> the entry", Lane: &lane},
	}
	b, err := json.Marshal(h)
	require.NoError(t, err)
	require.Equal(t, `{"job_id":12,"global_sequence":4,"state":"pending","attempt":0,"max_attempts":2,"lane":"customer-1",`+
		`"held_since":"2026-01-02T03:02:35Z","held_seconds":90,`+
		`"lane_blocked_by":{"job_id":9,"global_sequence":3,"state":"discarded","dead_letter":true,"attempt":2,"max_attempts":2,`+
		`"discarded_at":"2026-01-02T03:03:05Z","last_error":"ledger \u003crejected\u003e the entry","lane":"customer-1"},`+
		`"stuck":true}`, string(b))

	var back checkpoint.Holder
	require.NoError(t, json.Unmarshal(b, &back))
	h.ScheduledAt = time.Time{} // not in the JSON: no attempt to wait for
	require.Equal(t, h.At, back.At, "At is held_since plus held_seconds")
	require.Equal(t, *h, back)

	// A retrying job's next attempt is ScheduledAt, read back as such.
	h = &checkpoint.Holder{Job: checkpoint.Job{ID: 7, Sequence: 1, State: bustype.JobStateRetryable, Attempt: 3, MaxAttempts: 5,
		ScheduledAt: at.Add(20 * time.Second), LastError: "boom"}, HeldSince: at.Add(-5 * time.Second), At: at}
	b, err = json.Marshal(h)
	require.NoError(t, err)
	require.Contains(t, string(b), `"next_attempt_at":"2026-01-02T03:04:25Z"`)
	require.NotContains(t, string(b), "lane")
	back = checkpoint.Holder{}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, *h, back)
	require.Equal(t, 20*time.Second, back.Until(back.ScheduledAt))
}

// What `riverbus status` calls a stuck holder and a stalled pool: a failed
// job at once, any job after StuckAfter; a failed job stalls its pool when
// it is a dead letter, has held for StalledAfter, or waits that long for
// its next attempt.
func TestHolderStuckAndStalled(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	holder := func(held time.Duration, j checkpoint.Job) *checkpoint.Holder {
		return &checkpoint.Holder{Job: j, HeldSince: at.Add(-held), At: at}
	}
	available := checkpoint.Job{State: bustype.JobStateAvailable, ScheduledAt: at.Add(-time.Minute)}
	retrying := func(next time.Duration) checkpoint.Job {
		return checkpoint.Job{State: bustype.JobStateRetryable, Attempt: 1, LastError: "boom", ScheduledAt: at.Add(next)}
	}
	for _, tc := range []struct {
		what           string
		h              *checkpoint.Holder
		stuck, stalled bool
	}{
		{"a job that has not failed, briefly", holder(time.Second, available), false, false},
		{"a job that has not failed, for StuckAfter", holder(checkpoint.StuckAfter, available), true, false},
		{"a retry within seconds", holder(time.Second, retrying(time.Second)), true, false},
		{"a retry StalledAfter away", holder(time.Second, retrying(checkpoint.StalledAfter)), true, true},
		{"a retrying job that has held for StalledAfter", holder(checkpoint.StalledAfter, retrying(time.Second)), true, true},
		{"a dead letter blocking the lane", &checkpoint.Holder{Job: checkpoint.Job{State: bustype.JobStatePending}, HeldSince: at, At: at,
			LaneBlocker: &checkpoint.Job{State: bustype.JobStateDiscarded, DeadLetter: true}}, true, true},
	} {
		require.Equal(t, tc.stuck, tc.h.Stuck(), tc.what)
		require.Equal(t, tc.stalled, tc.h.Stalled(), tc.what)
	}

	_, ok := available.NextAttempt()
	require.False(t, ok, "an available job waits for no attempt")
	r := retrying(time.Minute)
	next, ok := r.NextAttempt()
	require.True(t, ok)
	require.Equal(t, at.Add(time.Minute), next)
}
