package webhook_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

// The receiver gets the envelope as stored, with every header, and the
// signature verifies with the secret and no other.
func TestDelivery(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	rcv := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent) // any 2xx is done
	})
	b := setup(t, 3, webhook.Config{URL: rcv.URL + "/in?token=abc", Secret: secret})

	before := time.Now()
	ev, jobID := b.appendEvent(t, "order.placed", "order-1", `{"order": 1, "note": "é <&>"}`)
	job := waitJobState(t, b.db, jobID, rivertype.JobStateCompleted)
	after := time.Now()
	require.Equal(t, 1, job.Attempt)
	require.Empty(t, job.Errors)

	got := rcv.deliveries()
	require.Len(t, got, 1)
	d := got[0]
	require.Equal(t, http.MethodPost, d.Method)
	require.Equal(t, "/in", d.Path)
	require.Equal(t, "token=abc", d.Query)

	// The body is the event's envelope as the log holds it: the job's args.
	// (Its text is PostgreSQL's, which writes occurred_at with the
	// session's offset where Go writes Z.)
	require.Equal(t, logEnvelope(t, b.db, ev.GlobalSequence), string(d.Body))
	var decoded, stored workers.Args
	require.NoError(t, json.Unmarshal(d.Body, &decoded))
	require.NoError(t, json.Unmarshal([]byte(job.Args), &stored))
	require.Equal(t, stored.GlobalSequence, decoded.GlobalSequence)
	require.JSONEq(t, string(ev.Data), string(decoded.Data))
	require.Equal(t, ev.Key, decoded.Key)
	require.Equal(t, ev.EventID, decoded.EventID)
	require.True(t, ev.OccurredAt.Equal(decoded.OccurredAt))
	require.False(t, decoded.Late)

	h := d.Header
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, ev.EventID.String(), h.Get("Idempotency-Key"))
	require.Equal(t, ev.EventID.String(), h.Get("Webhook-Id"))
	ts, err := strconv.ParseInt(h.Get("Webhook-Timestamp"), 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ts, before.Unix())
	require.LessOrEqual(t, ts, after.Unix())
	require.True(t, strings.HasPrefix(h.Get("Webhook-Signature"), "v1,"), h.Get("Webhook-Signature"))
	require.Equal(t, pool, h.Get("X-Riverbus-Pool"))
	require.Equal(t, strconv.FormatInt(ev.GlobalSequence, 10), h.Get("X-Riverbus-Sequence"))
	require.Equal(t, "1", h.Get("X-Riverbus-Attempt"))
	require.Empty(t, h.Values("X-Riverbus-Late"))

	// The signature is Sign's, and Verify accepts it.
	require.Equal(t, webhook.Sign(secret, ev.EventID.String(), time.Unix(ts, 0), d.Body), h.Get("Webhook-Signature"))
	require.NoError(t, webhook.Verify(secret, h, d.Body, 0))
	require.NoError(t, webhook.Verify(secret, h, d.Body, time.Minute))

	// A wrong secret fails.
	err = webhook.Verify([]byte("0123456789abcdef0123456789abcdeX"), h, d.Body, 0)
	require.ErrorIs(t, err, webhook.ErrInvalidSignature)

	// A tampered body fails.
	tampered := []byte(strings.Replace(string(d.Body), "order-1", "order-2", 1))
	require.NotEqual(t, d.Body, tampered)
	require.ErrorIs(t, webhook.Verify(secret, h, tampered, 0), webhook.ErrInvalidSignature)

	// Another id or timestamp than signed fails.
	h2 := h.Clone()
	h2.Set("Webhook-Timestamp", strconv.FormatInt(ts+1, 10))
	require.ErrorIs(t, webhook.Verify(secret, h2, d.Body, 0), webhook.ErrInvalidSignature)
	h2 = h.Clone()
	h2.Set("Webhook-Id", "00000000-0000-0000-0000-000000000000")
	require.ErrorIs(t, webhook.Verify(secret, h2, d.Body, 0), webhook.ErrInvalidSignature)

	// A correctly signed but old delivery fails beyond the tolerance, and
	// passes when the check is off.
	old := time.Now().Add(-10 * time.Minute)
	h3 := h.Clone()
	h3.Set("Webhook-Timestamp", strconv.FormatInt(old.Unix(), 10))
	h3.Set("Webhook-Signature", webhook.Sign(secret, ev.EventID.String(), old, d.Body))
	require.ErrorIs(t, webhook.Verify(secret, h3, d.Body, 0), webhook.ErrTimestampOutOfTolerance)
	require.ErrorIs(t, webhook.Verify(secret, h3, d.Body, 5*time.Minute), webhook.ErrTimestampOutOfTolerance)
	require.NoError(t, webhook.Verify(secret, h3, d.Body, 11*time.Minute))
	require.NoError(t, webhook.Verify(secret, h3, d.Body, -1))
}

// lateArgs inserts a pool job the way the fan-out does for a late event.
type lateArgs struct{ workers.Args }

func (lateArgs) Kind() string { return pool }

// A late event is flagged in the body and a header; without a secret there
// is no signature.
func TestDeliveryLateUnsigned(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(int, http.ResponseWriter, *http.Request) {})
	b := setup(t, 3, webhook.Config{URL: rcv.URL})

	ev := b.insertEvent(t, "t", "k", `{}`) // not fanned out: the job below is its only one
	res, err := b.client.Insert(context.Background(), lateArgs{workers.Args{Event: ev, Late: true}},
		&river.InsertOpts{Queue: pool})
	require.NoError(t, err)
	waitJobState(t, b.db, res.Job.ID, rivertype.JobStateCompleted)

	got := rcv.deliveries()
	require.Len(t, got, 1)
	require.Equal(t, "true", got[0].Header.Get("X-Riverbus-Late"))
	require.Equal(t, strconv.FormatInt(ev.GlobalSequence, 10), got[0].Header.Get("X-Riverbus-Sequence"))
	require.Empty(t, got[0].Header.Values("Webhook-Signature"))
	var decoded workers.Args
	require.NoError(t, json.Unmarshal(got[0].Body, &decoded))
	require.True(t, decoded.Late)
	require.Equal(t, ev.EventID, decoded.EventID)
}

// A receiver answering 503 then 500 gets the job a third time, and the job
// completes at attempt 3 with both errors recorded.
func TestRetryOnServerError(t *testing.T) {
	t.Parallel()
	secret := []byte("retry-secret")
	rcv := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 1:
			// Retry-After is reported, not obeyed; a long body with a NUL
			// byte is cut and cleaned so River can store the error.
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("\x00" + strings.Repeat("x", 2000)))
		case 2:
			http.Error(w, "boom: database down", http.StatusInternalServerError)
		}
	})
	b := setup(t, 5, webhook.Config{URL: rcv.URL, Secret: secret})

	ev, jobID := b.appendEvent(t, "order.placed", "order-1", `{"order": 1}`)
	job := waitJobState(t, b.db, jobID, rivertype.JobStateCompleted)
	require.Equal(t, 3, job.Attempt)
	require.Len(t, job.Errors, 2)
	require.Contains(t, job.Errors[0], "POST "+rcv.URL+": status 503 Service Unavailable (Retry-After: 3600): \uFFFDxxx")
	require.Equal(t, 511, strings.Count(job.Errors[0], "x"), "512 bytes of body, the first a NUL")
	require.Contains(t, job.Errors[1], "status 500 Internal Server Error: boom: database down")

	got := rcv.deliveries()
	require.Len(t, got, 3)
	for i, d := range got {
		require.Equal(t, strconv.Itoa(i+1), d.Header.Get("X-Riverbus-Attempt"))
		require.Equal(t, ev.EventID.String(), d.Header.Get("Webhook-Id"))
		require.Equal(t, ev.EventID.String(), d.Header.Get("Idempotency-Key"))
		require.Equal(t, got[0].Body, d.Body)
		require.NoError(t, webhook.Verify(secret, d.Header, d.Body, 0))
	}
}

// A receiver that does not answer within Timeout fails the attempt; the
// next one is delivered.
func TestRetryOnTimeout(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select {
			case <-r.Context().Done(): // the sender gave up
			case <-time.After(10 * time.Second):
			}
		}
	})
	b := setup(t, 3, webhook.Config{URL: rcv.URL, Timeout: 300 * time.Millisecond})

	_, jobID := b.appendEvent(t, "slow", "k", `{}`)
	job := waitJobState(t, b.db, jobID, rivertype.JobStateCompleted)
	require.Equal(t, 2, job.Attempt)
	require.Len(t, job.Errors, 1)
	require.Contains(t, job.Errors[0], "POST "+rcv.URL+": no response within 300ms")
	require.Len(t, rcv.deliveries(), 2)
}

// A refused connection is retried like any failure, until the attempts are
// used up.
func TestRetryOnRefusedConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	b := setup(t, 2, webhook.Config{URL: "http://" + addr + "/hook"})
	_, jobID := b.appendEvent(t, "t", "k", `{}`)
	job := waitJobState(t, b.db, jobID, rivertype.JobStateDiscarded)
	require.Equal(t, 2, job.Attempt)
	require.Len(t, job.Errors, 2)
	for _, e := range job.Errors {
		require.Contains(t, e, "POST http://"+addr+"/hook: ")
		require.Contains(t, e, "connection refused")
	}
}

// A job failing every attempt becomes a dead letter; retried once the
// receiver is fixed, it is delivered and completes.
func TestDeadLetterAndRetry(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	rcv := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			http.Error(w, "not deployed yet", http.StatusNotFound)
		}
	})
	b := setup(t, 2, webhook.Config{URL: rcv.URL})
	ctx := context.Background()

	ev, jobID := b.appendEvent(t, "invoice.paid", "inv-1", `{"cents": 500}`)
	job := waitJobState(t, b.db, jobID, rivertype.JobStateDiscarded)
	require.Equal(t, 2, job.Attempt)

	operator, err := riverbus.NewClient(b.db, nil)
	require.NoError(t, err)
	var dls []bustype.DeadLetter
	testwait.Eventually(t, 10*time.Second, func() bool {
		var err error
		dls, err = operator.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: pool})
		require.NoError(t, err)
		return len(dls) == 1
	}, "one dead letter")
	require.Equal(t, jobID, dls[0].JobID)
	require.Equal(t, ev.GlobalSequence, dls[0].GlobalSequence)
	require.Contains(t, dls[0].LastError, "status 404 Not Found: not deployed yet")
	require.Len(t, dls[0].Errors, 2)

	healthy.Store(true)
	res, err := operator.DeadLetterRetry(ctx, jobID)
	require.NoError(t, err)
	require.Equal(t, bustype.RetryRequeued, res.Action)
	job = waitJobState(t, b.db, res.JobID, rivertype.JobStateCompleted)
	require.Equal(t, 3, job.Attempt)

	got := rcv.deliveries()
	require.Len(t, got, 3)
	require.Equal(t, "3", got[2].Header.Get("X-Riverbus-Attempt"))
	require.Equal(t, ev.EventID.String(), got[2].Header.Get("Webhook-Id"))

	dls, err = operator.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: pool})
	require.NoError(t, err)
	require.Empty(t, dls)
}

func TestRegisterValidates(t *testing.T) {
	t.Parallel()
	valid := webhook.Config{Pool: "hooks", URL: "https://example.com/in"}
	for _, tt := range []struct {
		name string
		edit func(*webhook.Config)
		want string
	}{
		{"no pool", func(c *webhook.Config) { c.Pool = "" }, "Pool must be"},
		{"bad pool", func(c *webhook.Config) { c.Pool = "a b" }, "Pool must be"},
		{"one-character pool", func(c *webhook.Config) { c.Pool = "a" }, "Pool must be"}, // River refuses such a kind
		{"no URL", func(c *webhook.Config) { c.URL = "" }, "URL must be an absolute http or https URL"},
		{"relative URL", func(c *webhook.Config) { c.URL = "/in" }, "URL must be"},
		{"no host", func(c *webhook.Config) { c.URL = "http:///in" }, "URL must be"},
		{"other scheme", func(c *webhook.Config) { c.URL = "ftp://example.com/in" }, "URL must be"},
		{"opaque", func(c *webhook.Config) { c.URL = "http:example.com" }, "URL must be"},
		{"bad URL", func(c *webhook.Config) { c.URL = "http://exa mple.com/%zz" }, "URL must be"},
		{"negative timeout", func(c *webhook.Config) { c.Timeout = -2 * time.Second }, "Timeout must be positive or -1 (none), got -2s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.edit(&cfg)
			err := webhook.Register(river.NewWorkers(), cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}

	// Credentials in a rejected URL stay out of the error.
	err := webhook.Register(river.NewWorkers(), webhook.Config{Pool: "hooks", URL: "ftp://user:hunter2@example.com/?token=s3cret"})
	require.ErrorContains(t, err, "URL must be")
	require.NotContains(t, err.Error(), "hunter2")
	require.NotContains(t, err.Error(), "s3cret")

	require.ErrorContains(t, webhook.Register(nil, valid), "workers is nil")

	ws := river.NewWorkers()
	require.NoError(t, webhook.Register(ws, valid))
	cfg := valid
	cfg.Timeout = -1
	require.NoError(t, webhook.Register(ws, webhook.Config{Pool: "other", URL: "http://localhost:8080", Timeout: -1}))
	require.ErrorContains(t, webhook.Register(ws, cfg), `worker for kind "hooks" is already registered`)
}

// An event too big to travel in its job (the job holds a reference,
// bustype.EventJobRef) is delivered whole, as the log holds it, and
// signed as any other. A reference is accepted only as the fan-out makes
// one: a forged reference to a small event, or one that also carries data,
// is refused.
func TestDeliveryOfABigEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret := []byte("0123456789abcdef0123456789abcdef")
	rcv := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {})
	b := setupWith(t, setupOpts{Webhook: webhook.Config{URL: rcv.URL, Secret: secret}, WorkerLogin: true})

	ev, jobID := b.appendEvent(t, "order.placed", "order-1", `{"s": "`+strings.Repeat("a", 1<<20)+`"}`)
	job := waitJobState(t, b.db, jobID, rivertype.JobStateCompleted)
	require.Empty(t, job.Errors)
	require.Contains(t, job.Args, `"payload_in_log": true`, "the job holds a reference")
	require.NotContains(t, job.Args, `"data"`)

	got := rcv.deliveries()
	require.Len(t, got, 1)
	require.Equal(t, logEnvelope(t, b.db, ev.GlobalSequence), string(got[0].Body))
	require.NoError(t, webhook.Verify(secret, got[0].Header, got[0].Body, 0))

	small, smallJob := b.appendEvent(t, "order.placed", "order-2", `{"small": true}`)
	waitJobState(t, b.db, smallJob, rivertype.JobStateCompleted)
	var ref, withData string
	require.NoError(t, b.db.QueryRow(ctx, `SELECT (e - '{data,metadata}'::text[] || '{"payload_in_log": true}')::text,
		(e || '{"payload_in_log": true}')::text
		FROM (SELECT riverbus_event_envelope(ARRAY[$1::bigint])->0 AS e) x`, small.GlobalSequence).Scan(&ref, &withData))
	worker := pgtest.Login(t, b.db, "riverbus_worker")
	for _, args := range []string{ref, withData} {
		id := forgeJob(t, worker, bustype.DefaultQueue(pool), args)
		forged := waitJobState(t, b.db, id, rivertype.JobStateDiscarded)
		require.Len(t, forged.Errors, 1)
		require.Contains(t, forged.Errors[0], "payload_in_log", args)
	}
	require.Len(t, rcv.deliveries(), 2, "only the two real events were sent")
}

// A big event's envelope is read with one of the process's few big reads
// (workers.PayloadRead), which every client and webhook in the process
// share: while they are all taken the delivery is snoozed, not attempted
// (no request, no attempt used), and it goes out once one is free. Not
// parallel: it takes the process's reads from the other tests.
func TestBigDeliveriesShareTheProcessReads(t *testing.T) {
	ctx := context.Background()
	rcv := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {})
	b := setupWith(t, setupOpts{Webhook: webhook.Config{URL: rcv.URL, Secret: []byte("0123456789abcdef0123456789abcdef"), Timeout: 2 * time.Second}})

	var releases []func()
	for range workers.PayloadReadsMax {
		release, err := workers.PayloadRead(ctx, time.Second)
		require.NoError(t, err)
		releases = append(releases, sync.OnceFunc(release))
		t.Cleanup(releases[len(releases)-1])
	}
	_, jobID := b.appendEvent(t, "order.placed", "order-1", `{"s": "`+strings.Repeat("a", 1<<20)+`"}`)
	testwait.Eventually(t, 30*time.Second, func() bool {
		var snoozes int
		err := b.db.QueryRow(ctx, `SELECT coalesce((metadata->>'snoozes')::int, 0) FROM river_job WHERE id = $1`, jobID).Scan(&snoozes)
		return err == nil && snoozes >= 1
	}, "the delivery is snoozed while the process's big reads are taken")
	require.Empty(t, rcv.deliveries(), "no request while no read was free")
	for _, release := range releases {
		release()
	}
	job := waitJobState(t, b.db, jobID, rivertype.JobStateCompleted)
	require.Empty(t, job.Errors, "a snooze is no failed attempt")
	require.Len(t, rcv.deliveries(), 1)
}
