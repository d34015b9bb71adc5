package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
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
	"github.com/riverbus/riverbus/workers"
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
	var forgedVersion map[string]any
	require.NoError(t, json.Unmarshal([]byte(env1), &forgedVersion))
	forgedVersion["version"] = 2
	forgedVersionArgs, err := json.Marshal(forgedVersion)
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
		{"forged version", bustype.DefaultQueue(pool), string(forgedVersionArgs), "as riverbus_event holds it (version)"},
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

// A transaction-grouped pool's job is delivered as the log holds each of
// its events; a group job naming an event of another transaction is
// refused.
func TestGroupDeliveredAsTheLogHoldsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret := []byte("group-secret-0123456789abcdef012")
	rcv := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	b := setupWith(t, setupOpts{
		Pool:        bustype.PoolParams{Grouping: bustype.GroupTransaction},
		Webhook:     webhook.Config{URL: rcv.URL, Secret: secret},
		WorkerLogin: true,
	})
	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	var seqs []int64
	for i := range 3 {
		var seq int64
		require.NoError(t, tx.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data) VALUES ('order.line', 'order-1', jsonb_build_object('line', $1::int))
			RETURNING global_sequence`, i).Scan(&seq))
		seqs = append(seqs, seq)
	}
	require.NoError(t, tx.Commit(ctx))
	other, _ := b.appendEvent(t, "order.other", "order-2", `{"other": true}`)

	var jobID int64
	var args string
	testwait.Eventually(t, 10*time.Second, func() bool {
		_, err := b.fanout.Pass(ctx)
		require.NoError(t, err)
		return b.db.QueryRow(ctx, `SELECT id, args::text FROM river_job WHERE kind = $1 AND (args->>'global_sequence')::bigint = $2`,
			pool, seqs[0]).Scan(&jobID, &args) == nil
	}, "the group's job")
	waitJobState(t, b.db, jobID, rivertype.JobStateCompleted)

	var group workers.GroupArgs
	var d delivery
	testwait.Eventually(t, 10*time.Second, func() bool {
		for _, got := range rcv.deliveries() {
			if got.Header.Get("X-Riverbus-Sequence") == strconv.FormatInt(seqs[0], 10) {
				d = got
				return true
			}
		}
		return false
	}, "the group's delivery")
	require.NoError(t, webhook.Verify(secret, d.Header, d.Body, 0))
	require.NoError(t, json.Unmarshal(d.Body, &group))
	require.Len(t, group.Events, 3)
	require.Equal(t, group.Events[0].EventID.String(), d.Header.Get("Webhook-Id"))
	var raw struct{ Events []json.RawMessage }
	require.NoError(t, json.Unmarshal(d.Body, &raw))
	for i, ev := range raw.Events {
		require.Equal(t, logEnvelope(t, b.db, seqs[i]), string(ev))
	}

	// The same group with its last event swapped for another transaction's.
	var forged map[string]any
	require.NoError(t, json.Unmarshal([]byte(args), &forged))
	var otherEnv any
	require.NoError(t, json.Unmarshal([]byte(logEnvelope(t, b.db, other.GlobalSequence)), &otherEnv))
	forged["events"].([]any)[2] = otherEnv
	forgedArgs, err := json.Marshal(forged)
	require.NoError(t, err)
	id := forgeJob(t, pgtest.Login(t, b.db, "riverbus_worker"), bustype.DefaultQueue(pool), string(forgedArgs))
	job := waitJobState(t, b.db, id, rivertype.JobStateDiscarded)
	require.Len(t, job.Errors, 1)
	require.Contains(t, job.Errors[0], "is not of transaction "+group.TransactionID)
}

// A job inserted before events had versions has no "version" in its args:
// it is the log's version 1, not a forgery, and is delivered with the
// log's envelope, "version": 1 included.
func TestArgsWithoutVersionAreDelivered(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	b := setup(t, 3, webhook.Config{URL: rcv.URL})
	ev := b.insertEvent(t, "order.placed", "order-1", `{"order": 1}`) // not fanned out: the job below is its only one
	var old map[string]any
	require.NoError(t, json.Unmarshal([]byte(logEnvelope(t, b.db, ev.GlobalSequence)), &old))
	delete(old, "version")
	args, err := json.Marshal(old)
	require.NoError(t, err)
	id := forgeJob(t, b.db, bustype.DefaultQueue(pool), string(args))
	waitJobState(t, b.db, id, rivertype.JobStateCompleted)
	got := rcv.deliveries()
	require.Len(t, got, 1)
	require.JSONEq(t, logEnvelope(t, b.db, ev.GlobalSequence), string(got[0].Body))
	require.Contains(t, string(got[0].Body), `"version": 1`)
}
