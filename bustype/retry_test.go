package bustype_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
)

func TestRetryScheduleDelay(t *testing.T) {
	t.Parallel()
	s := bustype.RetrySchedule{Base: 500 * time.Millisecond, Factor: 1.5, MaxDelay: 2 * time.Second, Jitter: 0.2}
	var got []time.Duration
	for n := 0; n <= 6; n++ {
		got = append(got, s.Delay(n))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{500 * ms, 500 * ms, 750 * ms, 1125 * ms, 1687500 * time.Microsecond, 2000 * ms, 2000 * ms}, got, "0 counts as the first failure")
	require.Equal(t, 2*time.Second, s.Delay(math.MaxInt), "no overflow")
	require.Equal(t, 2*time.Second, s.Jittered(2*time.Second, 0))
	require.Equal(t, 1600*ms, s.Jittered(2*time.Second, 1), "at most Jitter shorter, never longer")
}

func TestRetryScheduleDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	require.Equal(t, bustype.RetryScheduleDefault, bustype.RetrySchedule{}.WithDefaults())
	require.Equal(t, bustype.RetrySchedule{Base: time.Hour, Factor: 2, MaxDelay: time.Hour, Jitter: 0},
		bustype.RetrySchedule{Base: time.Hour, Jitter: -1}.WithDefaults(), "max delay defaults to at least the base; -1 is no jitter")
	require.Equal(t, 1500*time.Microsecond, bustype.RetrySchedule{Base: 1500*time.Microsecond + 400}.WithDefaults().Base, "PostgreSQL's microseconds")

	for s, want := range map[bustype.RetrySchedule]string{
		{Base: time.Microsecond, Factor: 2, MaxDelay: time.Second}:         "retry base must be at least 1ms, got 1µs",
		{Base: time.Second, Factor: 0.9, MaxDelay: time.Second}:            "retry factor must be between 1 and 10, got 0.9",
		{Base: time.Second, Factor: math.NaN(), MaxDelay: time.Second}:     "retry factor must be between 1 and 10, got NaN",
		{Base: time.Minute, Factor: 2, MaxDelay: time.Second}:              "retry max delay must be at least the retry base (1m0s), got 1s",
		{Base: time.Second, Factor: 2, MaxDelay: 8 * 24 * time.Hour}:       "retry max delay must be at most 168h0m0s, got 192h0m0s",
		{Base: time.Second, Factor: 2, MaxDelay: time.Second, Jitter: 1.5}: "retry jitter must be between 0 and 1 (-1 for none in PoolParams), got 1.5",
	} {
		err := s.Validate()
		require.ErrorIs(t, err, bustype.ErrInvalidPool)
		require.EqualError(t, err, "invalid pool: "+want)
	}
	require.NoError(t, bustype.RetryScheduleDefault.Validate())
}

func TestRetryScheduleJSON(t *testing.T) {
	t.Parallel()
	s := bustype.RetrySchedule{Base: 1500 * time.Millisecond, Factor: 2.5, MaxDelay: 3 * time.Minute, Jitter: 0.1}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, `{"base": "1.5s", "factor": 2.5, "max_delay": "3m0s", "jitter": 0.1}`, string(b))
	var back bustype.RetrySchedule
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, s, back)
	require.Error(t, json.Unmarshal([]byte(`{"base": "soon"}`), &back))
}
