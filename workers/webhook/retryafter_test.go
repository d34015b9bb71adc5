package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"Thu, 26 Nov 2026 14:05:00 GMT", 5 * time.Minute, true},
		{"Thursday, 26-Nov-26 14:00:30 GMT", 30 * time.Second, true},
		{"Thu, 26 Nov 2026 13:00:00 GMT", 0, true},   // in the past: at once
		{"99999999999999999999999", 1<<63 - 1, true}, // huge: the pool's cap applies
		{"", 0, false}, {"-5", 0, false}, {"1.5", 0, false}, {"soon", 0, false},
		{"Thu, 26 Nov 2026 14:05:00", 0, false},
	} {
		got, ok := webhook.ParseRetryAfter(tc.in, now)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

// A receiver's Retry-After is honoured within the pool's maximum delay,
// and a malformed one is ignored, under a riverbus.Client as `riverbus
// work --webhook` runs it. Every delay is above River's scheduler interval
// (5s), so the job waits as retryable.
func TestRetryAfterWithinThePoolsMaxDelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	retryAfter := []string{
		"120", // within the cap
		time.Now().Add(2 * time.Hour).UTC().Format(http.TimeFormat), // beyond it
		"soon", // malformed
		"0",    // shorter than the schedule
	}
	rcv := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", retryAfter[min(n, len(retryAfter))-1])
		w.WriteHeader(http.StatusServiceUnavailable)
	})

	ws := workers.NewRegistry()
	require.NoError(t, webhook.Bind(ws, webhook.Config{Pool: pool, URL: rcv.URL, Logger: discardLogger}, nil))
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: pool, MaxAttempts: 10,
		Retry: bustype.RetrySchedule{Base: 10 * time.Second, Factor: 2, MaxDelay: 5 * time.Minute, Jitter: -1}})
	require.NoError(t, err)
	client := riverbustest.StartClient(t, db, &riverbus.Config{Workers: ws, Logger: discardLogger})
	_, err = outbox.Append(ctx, db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	var id int64
	testwait.Eventually(t, 30*time.Second, func() bool {
		return db.QueryRow(ctx, `SELECT id FROM river_job WHERE kind = $1`, pool).Scan(&id) == nil
	}, "the fan-out made the job")

	const slack = 30 * time.Second // the delivery and River's bookkeeping
	within := func(d, want time.Duration) {
		t.Helper()
		require.GreaterOrEqual(t, d, want)
		require.Less(t, d, want+slack)
	}
	within(jobtest.WaitRetryDelay(t, db, id, 1), 2*time.Minute)
	for n, want := range []time.Duration{5 * time.Minute, 40 * time.Second, 80 * time.Second} {
		_, err := client.River().JobRetry(ctx, id) // an operator's retry: at once
		require.NoError(t, err)
		within(jobtest.WaitRetryDelay(t, db, id, n+2), want)
	}
}
