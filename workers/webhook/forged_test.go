package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/workers/webhook"
)

// logEnvelope is event seq's envelope as riverbus_event holds it.
func logEnvelope(t *testing.T, db *pgxpool.Pool, seq int64) string {
	t.Helper()
	var env string
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT (riverbus_event_envelope(ARRAY[$1::bigint])->0)::text`, seq).Scan(&env))
	return env
}

// forgeJob inserts, as db's login, a job of pool "hooks" in queue with args.
func forgeJob(t *testing.T, db *pgxpool.Pool, queue, args string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.QueryRow(context.Background(),
		`INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, state, tags)
		VALUES ($1, $2, 3, '{}', 1, $3, 'available', '{}') RETURNING id`, args, pool, queue).Scan(&id))
	return id
}

// A riverbus_worker login cannot make a pool's webhook deliver what the
// log does not hold: a job with a forged payload for a real sequence, for a
// sequence with no event, for another pool's event this pool's filter
// excludes, in a queue not the pool's, or with args that are no envelope,
// is never sent; it ends a dead letter at its first attempt, its error
// naming why. Real events are delivered, signed, as the log holds them.
func TestForgedJobsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret := []byte("forgery-secret-0123456789abcdef0")
	rcv := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	b := setupWith(t, setupOpts{
		Pool:        bustype.PoolParams{EventTypes: []string{"order.placed"}},
		Webhook:     webhook.Config{URL: rcv.URL, Secret: secret},
		Queues:      []string{"spare"},
		WorkerLogin: true,
	})
	_, _, err := pools.Create(ctx, b.db, bustype.PoolParams{Name: "payments", EventTypes: []string{"payment.made"}})
	require.NoError(t, err)
	worker := pgtest.Login(t, b.db, "riverbus_worker")

	real1, realJob := b.appendEvent(t, "order.placed", "order-1", `{"order": 1}`)
	waitJobState(t, b.db, realJob, rivertype.JobStateCompleted)
	var payment int64
	require.NoError(t, b.db.QueryRow(ctx,
		`INSERT INTO riverbus_event (type, key, data) VALUES ('payment.made', 'pay-1', '{"cents": 5}') RETURNING global_sequence`).
		Scan(&payment))

	env1 := logEnvelope(t, b.db, real1.GlobalSequence)
	var forgedPayload map[string]any
	require.NoError(t, json.Unmarshal([]byte(env1), &forgedPayload))
	forgedPayload["data"] = map[string]any{"forged": "FORGED-PAYLOAD"}
	forgedPayloadArgs, err := json.Marshal(forgedPayload)
	require.NoError(t, err)
	forgedSequenceArgs, err := json.Marshal(map[string]any{
		"global_sequence": 1_000_000, "event_id": uuid.New(), "type": "order.placed", "key": "order-1",
		"tags": []string{}, "data": map[string]any{"forged": "FORGED-SEQUENCE"}, "metadata": map[string]any{},
		"occurred_at": time.Now(),
	})
	require.NoError(t, err)

	forged := []struct {
		name, queue, args, reason string
	}{
		{"forged payload", bustype.DefaultQueue(pool), string(forgedPayloadArgs), "its args differ from event"},
		{"forged sequence", bustype.DefaultQueue(pool), string(forgedSequenceArgs), "no event 1000000 in riverbus_event"},
		{"another pool's event", bustype.DefaultQueue(pool), logEnvelope(t, b.db, payment), `(type "payment.made") does not match the filter of pool hooks`},
		{"wrong queue", "spare", env1, `it is in queue spare, not in pool hooks's queue hooks`},
		{"no envelope", bustype.DefaultQueue(pool), `{"hello": "FORGED-GARBAGE"}`, "its args are not a riverbus event envelope"},
	}
	ids := make([]int64, len(forged))
	for i, f := range forged {
		ids[i] = forgeJob(t, worker, f.queue, f.args)
	}
	operator, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	for i, f := range forged {
		job := waitJobState(t, b.db, ids[i], rivertype.JobStateDiscarded)
		require.Equal(t, 1, job.Attempt, "%s: a dead letter at once, not after retries", f.name)
		require.Len(t, job.Errors, 1, f.name)
		require.Contains(t, job.Errors[0], "refused, not delivered", f.name)
		require.Contains(t, job.Errors[0], f.reason, f.name)
		var dl bustype.DeadLetter
		testwait.Eventually(t, 10*time.Second, func() bool {
			dls, err := operator.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: pool})
			require.NoError(t, err)
			for _, d := range dls {
				if d.JobID == ids[i] {
					dl = d
					return true
				}
			}
			return false
		}, "dead letter of %s", f.name)
		require.Contains(t, dl.LastError, f.reason, f.name)
	}

	// A real event after them is delivered, signed, as the log holds it.
	real2, realJob2 := b.appendEvent(t, "order.placed", "order-2", `{"order": 2}`)
	waitJobState(t, b.db, realJob2, rivertype.JobStateCompleted)
	got := rcv.deliveries()
	require.Len(t, got, 2, "only the two real events")
	for i, ev := range []int64{real1.GlobalSequence, real2.GlobalSequence} {
		d := got[i]
		require.NotContains(t, string(d.Body), "FORGED")
		require.NoError(t, webhook.Verify(secret, d.Header, d.Body, 0))
		require.JSONEq(t, logEnvelope(t, b.db, ev), string(d.Body))
	}
	require.Equal(t, real2.EventID.String(), got[1].Header.Get("Webhook-Id"))
}
