package workers

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// resolveArgs splices the payloads into the references only: a group's
// other events stay byte for byte, a single event keeps late, and a
// reference the log does not hold is an error naming it.
func TestResolveArgs(t *testing.T) {
	id1, id2 := uuid.New(), uuid.New()
	logged := map[int64]uuid.UUID{1: id1, 3: id2}
	query := func(_ context.Context, seqs []int64, ids []uuid.UUID) ([]int64, [][]byte, [][]byte, error) {
		var found []int64
		var data, metadata [][]byte
		for i, seq := range seqs {
			if logged[seq] == ids[i] {
				found = append(found, seq)
				data = append(data, []byte(`{"big": `+string(rune('0'+seq))+`}`))
				metadata = append(metadata, []byte(`{}`))
			}
		}
		return found, data, metadata, nil
	}
	ctx := context.Background()

	single := `{"global_sequence": 1, "event_id": "` + id1.String() + `", "type": "t", "key": "k", "tags": [], "occurred_at": "2026-01-01T00:00:00Z", "late": true, "payload_in_log": true}`
	got, err := resolveArgs(ctx, []byte(single), query)
	require.NoError(t, err)
	require.JSONEq(t, `{"global_sequence": 1, "event_id": "`+id1.String()+`", "type": "t", "key": "k", "tags": [], "occurred_at": "2026-01-01T00:00:00Z", "late": true, "data": {"big": 1}, "metadata": {}}`, string(got))

	small := `{"global_sequence":2,"event_id":"` + uuid.NewString() + `","data":{"payload_in_log":true},"metadata":{}}`
	group := `{"global_sequence": 1, "transaction_id": "9", "key": "k", "part": 1, "parts": 1, "events": [` +
		`{"global_sequence": 1, "event_id": "` + id1.String() + `", "payload_in_log": true},` + small + `,` +
		`{"global_sequence": 3, "event_id": "` + id2.String() + `", "payload_in_log": true}]}`
	got, err = resolveArgs(ctx, []byte(group), query)
	require.NoError(t, err)
	var g struct {
		Events []json.RawMessage `json:"events"`
		Part   int               `json:"part"`
	}
	require.NoError(t, json.Unmarshal(got, &g))
	require.Equal(t, 1, g.Part)
	require.Len(t, g.Events, 3)
	require.JSONEq(t, `{"global_sequence": 1, "event_id": "`+id1.String()+`", "data": {"big": 1}, "metadata": {}}`, string(g.Events[0]))
	require.Equal(t, small, string(g.Events[1]), "an event's data that merely holds the key is no reference")
	require.JSONEq(t, `{"global_sequence": 3, "event_id": "`+id2.String()+`", "data": {"big": 3}, "metadata": {}}`, string(g.Events[2]))

	none := []byte(`{"global_sequence":2,"data":{"payload_in_log":true}}`)
	got, err = resolveArgs(ctx, none, query)
	require.NoError(t, err)
	require.Equal(t, string(none), string(got))

	gone := `{"global_sequence": 7, "event_id": "` + uuid.NewString() + `", "payload_in_log": true}`
	_, err = resolveArgs(ctx, []byte(gone), query)
	require.ErrorContains(t, err, "refers to the payload of events [7] in riverbus_event, which no longer holds them")
}

// A client reads at most PayloadReadsMax jobs' big payloads at once: a job
// that finds every read taken for half its budget is snoozed (no attempt
// used), and the reads in flight go on. Without the bound, every job of a
// busy pool read its 60 MiB at once, each read slowed the others, and a
// worker process grew past 11 GB.
func TestResolvePayloadsReadsAtMostPayloadReadsMax(t *testing.T) {
	r := newResolvePayloads(time.Second, 3*time.Second) // budget 1 s
	r.reads = make(chan struct{}, PayloadReadsMax)      // the process's own, as every client shares it
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	query := func(ctx context.Context, seqs []int64, ids []uuid.UUID) ([]int64, [][]byte, [][]byte, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
			return seqs, [][]byte{[]byte(`{"big": true}`)}, [][]byte{[]byte(`{}`)}, nil
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		}
	}
	const jobs = PayloadReadsMax + 3
	errs := make(chan error, jobs)
	for i := range jobs {
		job := &rivertype.JobRow{ID: int64(i), EncodedArgs: []byte(`{"global_sequence": 1, "event_id": "` + uuid.NewString() + `", "payload_in_log": true}`)}
		go func() { errs <- r.resolve(context.Background(), job, query) }()
	}
	for range jobs - PayloadReadsMax {
		err := <-errs
		var snooze *rivertype.JobSnoozeError
		require.ErrorAs(t, err, &snooze, "a job beyond the reads in flight is snoozed")
		require.Equal(t, payloadSnooze, snooze.Duration)
	}
	require.Equal(t, int32(PayloadReadsMax), most.Load(), "reads in flight at once")
	close(release)
	for range PayloadReadsMax {
		require.NoError(t, <-errs)
	}
}

// A read gets half the margin River leaves a job beyond JobTimeout before
// its rescuer takes the job for stuck and starts it again: a slower read
// fails the attempt with an error naming the setting, instead of running
// on beside the rescued job's next attempt. A job whose own context ends
// (the client stopping) says that instead.
func TestResolvePayloadsBudget(t *testing.T) {
	r := newResolvePayloads(2*time.Second, 2*time.Second+400*time.Millisecond)
	require.Equal(t, 200*time.Millisecond, r.budget)
	blocked := func(ctx context.Context, _ []int64, _ []uuid.UUID) ([]int64, [][]byte, [][]byte, error) {
		<-ctx.Done()
		return nil, nil, nil, ctx.Err()
	}
	job := &rivertype.JobRow{ID: 7, EncodedArgs: []byte(`{"global_sequence": 1, "event_id": "` + uuid.NewString() + `", "payload_in_log": true}`)}
	start := time.Now()
	err := r.resolve(context.Background(), job, blocked)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "job 7: reading its big events' payloads from riverbus_event took over 200ms")
	require.ErrorContains(t, err, "RescueStuckJobsAfter 2.4s")
	require.Less(t, time.Since(start), 2*time.Second, "the read ended at its budget, long before the rescue")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = r.resolve(ctx, job, blocked)
	require.ErrorIs(t, err, context.Canceled)
	require.NotContains(t, err.Error(), "RescueStuckJobsAfter")

	unbounded := newResolvePayloads(-1, time.Hour)
	require.Equal(t, 30*time.Minute, unbounded.budget, "without JobTimeout, half of RescueStuckJobsAfter")
}
