package riverbus_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/lanes"
	"github.com/riverbus/riverbus/outbox"
)

// Start runs every service a fan-out process runs: the horizon, the pools'
// fan-out, the lane sweeper and the checkpoint advancer each report their
// work; Stop ends them, and a second Start runs them again.
func TestClientStartRunsEveryService(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{Fanout: fanout.Config{PollInterval: 50 * time.Millisecond}})
	require.NoError(t, err)
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "billing"})
	require.NoError(t, err)
	s, advancer := client.InitTestSignals(t)

	for round := range 2 {
		require.NoError(t, client.Start(ctx))
		appended, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		seq := appended[0].GlobalSequence
		s.Horizon.TestSignals.RoundDone.WaitFor("a round past the event", func(r fanout.RoundResult) bool { return r.Horizon >= seq })
		s.Pools.TestSignals.BatchDone.WaitFor("the event fanned out", func(r fanout.BatchResult) bool {
			return r.Pool == "billing" && r.Cursor >= seq
		})
		s.Sweeper.TestSignals.Swept.WaitFor("a sweep", func(lanes.SweepResult) bool { return true })
		// The job is not worked (no workers here): the checkpoint stays
		// below it, but the advancer runs.
		advancer.TestSignals.Advanced.WaitFor("checkpoints advanced", func(cps map[string]int64) bool {
			_, ok := cps["billing"]
			return ok
		})
		require.NoError(t, client.Stop(ctx), "round %d", round)
		select {
		case <-client.Stopped():
		default:
			t.Fatal("Stopped is open after Stop")
		}
		for _, d := range []interface{ Drain() }{&s.Horizon.TestSignals.RoundDone, &s.Pools.TestSignals.BatchDone,
			&s.Sweeper.TestSignals.Swept, &advancer.TestSignals.Advanced} {
			d.Drain()
		}
	}
}

// Start runs the retention service: once a policy is set it deletes what
// no pool needs, here every event the horizon passed (the only pool starts
// after them).
func TestClientStartRunsRetention(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	client, err := riverbus.NewClient(b.db, &riverbus.Config{
		Fanout:    fanout.Config{PollInterval: 50 * time.Millisecond},
		Retention: riverbus.RetentionConfig{Interval: 20 * time.Millisecond},
	})
	require.NoError(t, err)
	retainer := client.InitRetentionTestSignals(t)
	appended, err := outbox.Append(ctx, b.db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	seq := appended[0].GlobalSequence
	// A pool that starts after it: with no pool at all, nothing is deleted.
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "billing", From: bustype.FromSequence(seq)})
	require.NoError(t, err)

	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })
	plan := retainer.TestSignals.Trimmed.WaitOrTimeout()
	require.Equal(t, bustype.RetentionStopDisabled, plan.StoppedBy, "no policy: nothing is deleted")

	policy, err := client.RetentionSet(ctx, true, 0)
	require.NoError(t, err)
	require.True(t, policy.Enabled)
	retainer.TestSignals.Trimmed.WaitFor("the event trimmed", func(p bustype.RetentionPlan) bool {
		return p.Policy.TrimmedThrough >= seq
	})
	events, err := outbox.Read(ctx, b.db, outbox.ReadParams{})
	require.NoError(t, err)
	require.Empty(t, events)

	_, err = riverbus.NewClient(b.db, &riverbus.Config{Retention: riverbus.RetentionConfig{Interval: -2}})
	require.ErrorContains(t, err, "Retention.Interval")
}
