package workers

import (
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/stretchr/testify/require"
)

// TestListenerSortsByTopic: control messages go to the checker, never
// straight to River; a resign request passes at most once per
// resignIntervalMin; everything else passes as it arrived.
func TestListenerSortsByTopic(t *testing.T) {
	t.Parallel()
	l := newControlListener(nil, nil, "", slog.New(slog.DiscardHandler))

	cancel := &riverdriver.Notification{Topic: topicControl, Payload: `{"action":"cancel","job_id":7,"queue":"hooks"}`}
	require.Nil(t, l.sort(cancel))
	require.Equal(t, controlMessage{Action: actionCancel, JobID: 7, Queue: "hooks"}, <-l.pending)
	require.Nil(t, l.sort(&riverdriver.Notification{Topic: topicControl, Payload: `not json`}))
	require.Empty(t, l.pending)

	resign := &riverdriver.Notification{Topic: topicLeadership, Payload: `{"action":"request_resign"}`}
	require.Same(t, resign, l.sort(resign), "the first resign request passes")
	for range 10 {
		require.Nil(t, l.sort(resign), "a resign request within resignIntervalMin of the last is dropped")
	}
	l.lastResign = time.Now().Add(-resignIntervalMin)
	require.Same(t, resign, l.sort(resign))

	for _, n := range []*riverdriver.Notification{
		{Topic: topicLeadership, Payload: `{"action":"resigned","leader_id":"a"}`},
		{Topic: "river_insert", Payload: `{"queue":"hooks"}`},
	} {
		require.Same(t, n, l.sort(n))
	}
}
