// Package bustype holds riverbus's vocabulary: the types that the client
// (package riverbus), the producer side (package outbox), handlers (package
// workers) and webhooks share — pools and their settings, the stubs of job
// args, dead letters — and the errors they return. The event is
// outbox.Event, the args of a pool job workers.Args; checkpoints have their
// own package, checkpoint.
//
// It is a leaf package, like River's rivertype: it imports neither River nor
// pgx, so any package can use it without pulling in the engine (outbox, the
// producer side, depends on nothing of River through it). JobState and
// AttemptError mirror River's, and a test pins them to the River version in
// go.mod.
//
// # Sections
//
//   - Pools: Pool, PoolParams, StartPosition, RetrySchedule and the typed settings
//   - Dead letters: DeadLetter, DeadLetterListParams, DeadLetterRetryResult
//   - Errors: the sentinels every operation wraps
//
// # Enums
//
// Pool settings are typed strings (Ordering, Grouping, DeadLetterPolicy,
// PoolStatus). Each has a Valid method and a Parse function that returns an
// error naming the accepted values, so a bad setting is refused before it
// reaches the database. A dead letter's retry outcome is a RetryAction.
//
// # Dead letters
//
// A pool job that used up its attempts is discarded by River; a trigger
// keeps a copy of it in riverbus_dead_letter (a DeadLetter), so River's job
// cleaner cannot lose it. Retrying one gives a DeadLetterRetryResult whose
// RetryAction says whether the River job was made available again
// (RetryRequeued), inserted anew because River's cleaner had deleted it
// (RetryReinserted), found already finished (RetryAlreadyRetried), or left
// because its event still cannot become a job (RetryUndeliverable).
//
// # Job envelopes
//
// A pool job's args have one of five shapes, each one Go type: an event's
// (workers.Args) or a transaction group's, or a part of one
// (workers.GroupArgs), which handlers embed; the reference to a big
// event's payload that a job holds until the worker reads it
// (EventJobRef); and the stubs a dead letter carries when its unit could
// never become a job (EventJobStub, GroupJobStub). The fan-out builds them
// in Go and, for plain pools, in SQL; a test pins the SQL to these types
// key for key.
package bustype
