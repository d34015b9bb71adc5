package bustype

import (
	"encoding/json"
	"time"
)

// DeadLetter is a pool job River discarded after its last attempt, as kept
// in riverbus_dead_letter: River's job cleaner cannot lose it, and it stays
// until an operator retries or purges it.
type DeadLetter struct {
	// JobID is the id of the discarded River job.
	JobID int64
	// Pool is the pool, which is the job's kind.
	Pool string
	// Queue is the River queue the job was in.
	Queue string
	// GlobalSequence is the event's global sequence, 0 when the args had
	// none.
	GlobalSequence int64
	// EventType and EventKey are the event's type and key, from the args.
	EventType string
	EventKey  string
	// Late is true for a late event.
	Late bool
	// Attempt is the number of attempts made; MaxAttempts the most allowed.
	Attempt     int
	MaxAttempts int
	// Priority is the job's River priority.
	Priority int
	// LastError is the error text of the last attempt, empty when none was
	// recorded (a job discarded by River's rescuer, say). It is the
	// handler's text: escape it before printing it to a terminal.
	LastError string
	// Errors are all the attempts' errors River recorded, oldest first.
	Errors []AttemptError
	// DiscardedAt is when River discarded the job.
	DiscardedAt time.Time
	// JobExists is true while the river_job row still exists; River's job
	// cleaner deletes discarded jobs after its DiscardedJobRetentionPeriod
	// (never, by riverbus's default: see workers.Config).
	JobExists bool
	// JobState is the river_job row's state when it exists:
	// JobStateDiscarded. (A job put back to work by River UI or
	// River's Client.JobRetry is no longer a dead letter: a trigger removes
	// it. Only a job finished by other means, plain SQL say, or retried
	// before migration 009, leaves a dead letter in another state.)
	JobState JobState
	// Args are the job's args: the event envelope, or for an event the
	// fan-out could not turn into a job, the envelope without its payload
	// and the reason under "undeliverable".
	Args json.RawMessage
}

// Limits of DeadLetterListParams.Limit.
const (
	DeadLetterListLimitDefault = 100
	DeadLetterListLimitMax     = 10_000
)

// DeadLetterListParams select the dead letters a list returns, in job id
// order. The zero value lists the first DeadLetterListLimitDefault of every
// pool.
type DeadLetterListParams struct {
	// Pool limits the list to one pool; empty lists all pools.
	Pool string
	// Limit is the most dead letters returned. Zero:
	// DeadLetterListLimitDefault; at most DeadLetterListLimitMax.
	Limit int
	// AfterJobID returns dead letters with a higher job id only: pass the
	// last JobID of a page to get the next.
	AfterJobID int64
}

// RetryAction says what retrying one dead letter did.
type RetryAction string

// Retry actions.
const (
	// RetryRequeued: the discarded river_job row was made available again,
	// as River's JobRetry does (one more attempt when all were used; attempt
	// count and errors kept).
	RetryRequeued RetryAction = "requeued"
	// RetryReinserted: River's cleaner had deleted the river_job row, so a
	// new available job was inserted with the same kind, queue, args, max
	// attempts and priority (and a fresh attempt count).
	RetryReinserted RetryAction = "reinserted"
	// RetryAlreadyRetried: the river_job row was no longer discarded — it
	// was finished by other means than River's retry (which removes the
	// dead letter itself), or retried before migration 009 — so it was
	// left alone and only the stale dead letter removed.
	RetryAlreadyRetried RetryAction = "already_retried"
	// RetryUndeliverable: the dead letter is of an event the fan-out could
	// not turn into a job, and its envelope, rebuilt from riverbus_event,
	// still cannot be encoded: it was left as it is. Repair the event row,
	// or purge the dead letter.
	RetryUndeliverable RetryAction = "undeliverable"
)

// DeadLetterRetryResult is the outcome of retrying one dead letter.
type DeadLetterRetryResult struct {
	// DeadJobID is the job id of the dead letter.
	DeadJobID int64
	// JobID is the job that works the event again: DeadJobID unless the job
	// was reinserted.
	JobID int64
	// Action says what was done.
	Action RetryAction
	// Reason is why the dead letter stays, for RetryUndeliverable; empty
	// otherwise.
	Reason string
}
