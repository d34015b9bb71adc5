// Package webhook delivers the jobs of a riverbus pool to an HTTP endpoint,
// so that handlers can be written in any language.
//
// A pool turns every matching event into one River job whose kind is the
// pool name and whose args are the event envelope. Register adds a River
// worker for that kind which POSTs the args to a URL, signed the Standard
// Webhooks way (https://www.standardwebhooks.com/). River brings the rest:
// retries with backoff, job timeouts, rescue of jobs whose worker died, and
// after the last attempt a discarded job, which riverbus keeps as a dead
// letter (see package workers).
//
// # Sections
//
//   - Registering: Bind, Register and Config
//   - The request: body and headers, the event's version
//   - What is delivered: the log, not the job row
//   - Signatures: the scheme, for receivers in any language; Sign, Verify
//   - A receiver in Go
//   - Outcome and retries: what counts as delivered
//   - Redirects
//   - Idempotency
//   - Secrets: SecretFromEnv
//
// # Registering
//
// Bind(ws, cfg, opts) binds the delivery of pool cfg.Pool to a
// workers.Registry, as workers.Add binds a Go handler; a
// riverbus.Client started with those workers works the pool's queue:
//
//	ws := workers.NewRegistry()
//	err := webhook.Bind(ws, webhook.Config{Pool: "billing", URL: "https://billing.internal/events", Secret: secret},
//		&workers.AddOpts{MaxWorkers: 10})
//	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws})
//	err = client.Start(ctx)
//
// Register(ws, cfg) adds the same worker to a plain river.Workers, for an
// application that runs its own River client over pool jobs.
//
// River registers workers by Go type and each type has a fixed Kind, while
// a pool name is only known at run time; Register therefore uses
// river.AddWorkerArgs with an args value whose Kind is the pool name. Config
// is validated by Register, with errors naming the field.
//
// # The request
//
// Each attempt of a job is one POST to Config.URL with Content-Type
// application/json. The body is the event envelope as riverbus_event holds
// it: a JSON object with global_sequence, event_id, type, key, tags, data,
// metadata, occurred_at (RFC 3339) and version (the version of the event
// type's data, 1 for a type's first), plus "late": true for a late event.
// A webhook bound with Bind sends each event at the version its registry's
// upcasters bring its type to (workers.Registry.Upcast): data and version
// are then the upcast ones, the rest as the log holds it, and a failing
// upcaster fails the attempt like any error (the job ends a dead letter
// with the reason, and nothing is sent). Register's webhook sends the
// stored version.
// A transaction-grouped pool's job is sent as a workers.GroupArgs
// (workers.GroupArgs): global_sequence (its first event's),
// transaction_id, key, events (each an envelope as the log holds it), part
// and parts. The envelopes' text is PostgreSQL's jsonb output, so key order,
// white space and occurred_at's offset are PostgreSQL's; parse it as JSON,
// and verify the signature over the raw bytes before parsing.
//
// Headers:
//
//	Webhook-Id          the event id (a UUID; a group's first event's); the same on every attempt
//	Idempotency-Key     the event id, again
//	Webhook-Timestamp   the attempt's time, Unix seconds, decimal
//	Webhook-Signature   v1,<signature> — only when Config.Secret is set
//	X-Riverbus-Pool     the pool name
//	X-Riverbus-Sequence the event's global sequence, decimal
//	X-Riverbus-Attempt  the River attempt: 1, 2, ...
//	X-Riverbus-Late     true — only for a late event
//	traceparent         the W3C trace context, when the event was appended in a
//	                    trace: the worker's work span, else the append span
//	User-Agent          riverbus-webhook
//
// # What is delivered: the log, not the job row
//
// Any riverbus_worker login may insert or change a River job, in any
// queue, with any args; a signature over what a job row says would vouch
// for whatever that login wrote. So each attempt first reads, in one round
// trip (the pool's row and each event by its primary key), what the log
// holds for the sequences the job names, and sends that. It sends nothing,
// and discards the job at once with the reason as its error (a dead letter
// that `riverbus dlq list` and River UI show), when the job is not in the
// pool's queue; names an event riverbus_event does not hold (made up, or
// deleted by retention, which never deletes an event an unfinished job of
// a pool needs); names an event the pool's filter (types, tags) does not
// match; has args that differ from the log's envelope in any field, or
// that carry fields of their own; is a group in a pool that does not group
// (or the reverse); or is a group whose events are not of its transaction
// (or, in a key-ordered pool, of its key). A refused job's error starts
// "job N refused, not delivered:". Retrying it refuses it again; purge it.
// The late flag is the job's: the log does not keep it once every pool
// has handled the late event. Changing a pool's filter or grouping while it has
// unfinished jobs makes those of events the new filter excludes dead
// letters of this kind.
//
// # Signatures
//
// The scheme is Standard Webhooks' symmetric one (Svix's, close to
// Stripe's), so its libraries verify riverbus deliveries. For a delivery
// with id ID (Webhook-Id), timestamp TS (Webhook-Timestamp, as sent) and
// body BODY (the raw bytes):
//
//  1. The signed content is the bytes ID + "." + TS + "." + BODY.
//  2. The signature is HMAC-SHA256 of the signed content, keyed with the
//     secret's bytes, encoded in standard base64 with padding (RFC 4648
//     section 4, not URL-safe).
//  3. Webhook-Signature is "v1," followed by that base64. A receiver must
//     accept a header with several space-separated entries and succeed when
//     any "v1," entry matches, which allows a sender to rotate secrets.
//
// A receiver recomputes the signature, compares it in constant time
// (hmac.compare_digest, crypto.timingSafeEqual, hmac.Equal), and rejects a
// timestamp more than a few minutes away from its clock, in either
// direction, which defeats replays (VerifyToleranceDefault is five minutes).
// The timestamp and signature are fresh on every attempt; the id is not.
//
// The secret's bytes are the HMAC key. Standard Webhooks libraries take the
// secret as "whsec_" + base64(key); SecretFromEnv reads that form too, and
// any other value as raw bytes. With the key bytes "secret", an id
// "msg_1", a timestamp 1700000000 and the body {"a":1}, the signed content
// is `msg_1.1700000000.{"a":1}`. The Standard Webhooks test vector checks
// an implementation: secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, id
// msg_p5jXN8AQM9LWM0D4loKWxJek, timestamp 1614265330 and body
// {"test": 2432232314} sign as
// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=.
//
// Sign computes a signature and Verify checks a received delivery.
//
// # A receiver in Go
//
//	secret, err := webhook.SecretFromEnv("WEBHOOK_SECRET")
//	http.HandleFunc("POST /events", func(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//		if err != nil || webhook.Verify(secret, r.Header, body, 0) != nil {
//			http.Error(w, "bad signature", http.StatusUnauthorized) // retried
//			return
//		}
//		var ev workers.Args // or any struct with the envelope's fields
//		if err := json.Unmarshal(body, &ev); err != nil || handle(r.Context(), ev) != nil {
//			http.Error(w, "failed", http.StatusInternalServerError) // retried
//		} // 200: delivered
//	})
//
// # Outcome and retries
//
// Any 2xx status completes the job; the response body is ignored. Anything
// else — another status, no response within Config.Timeout, a refused
// connection, a TLS or DNS failure, a refused redirect — is an error: River
// records it on the job (a *StatusError for a status, with at most
// ErrorBodyMax bytes of the response body) and retries the job with its
// retry policy until the job's max attempts (the pool's) are used up. Then
// River discards the job and riverbus keeps it as a dead letter, which
// workers.RetryDeadLetter sends again once the receiver is fixed. An answer
// of 4xx is retried too: it usually means a receiver that is misconfigured
// or not yet deployed, and a dead letter is better than a lost event.
//
// A failed delivery is retried on the pool's retry schedule
// (bustype.RetrySchedule: by default 1s, doubling, at most 3 minutes). A
// Retry-After header (seconds or an HTTP date, on any failed answer, 429
// and 503 mostly) is obeyed within that schedule's maximum delay: the next
// attempt waits the longer of Retry-After and the schedule's delay, never
// more than MaxDelay, and still uses up an attempt, so a receiver that
// always answers 503 ends as a dead letter, not a job kept alive forever
// (which river.JobSnooze would do). A malformed Retry-After is ignored. The
// worker passes it on as a workers.RetryAfterError, which the retry policy
// of a riverbus.Client's River client reads (ParseRetryAfter parses it).
//
// Response bodies are read up to DrainMax bytes and closed, so connections
// are reused.
//
// Config.URL may hold credentials: a password, a token as its user name,
// tokens in its query. Job errors (which River stores and River UI and
// `riverbus status` show), logs, a panic's value and command output show it
// as Redact does (https://user:xxxxx@host/hook?token=xxxxx), and the
// credentials are masked anywhere else in an error too, such as a response
// body that echoes the request.
//
// # Redirects
//
// With the default client (or a Config.Client without CheckRedirect), a
// delivery follows at most MaxRedirects (3) redirects, and only those that
// stay on the same host and port, do not go from https to http, and keep
// the POST: 307 and 308. A 301, 302 or 303 would turn the POST into a GET
// without the event, whose 2xx would look like a delivery, so it is refused
// like a redirect to another host: the attempt fails with an error that
// says why, never silently. Point Config.URL at the final address.
//
// # Idempotency
//
// Delivery is at least once: a worker that dies after the receiver answered
// but before River recorded it delivers again, with the same Webhook-Id and
// a new timestamp and signature. Receivers deduplicate on Webhook-Id
// (equivalently Idempotency-Key). The id is the event's, so two pools that
// send the same event to one endpoint send the same id; such an endpoint
// deduplicates on the pair X-Riverbus-Pool and Webhook-Id.
//
// # Secrets
//
// SecretFromEnv reads a secret from an environment variable, for a flag
// like --secret-env WEBHOOK_SECRET that keeps secrets out of command lines,
// and fails clearly when the variable is unset or empty.
package webhook
