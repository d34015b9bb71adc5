// Package retry is the River retry policy of pool jobs: a failed job of a
// pool is attempted again on the pool's retry schedule
// (bustype.RetrySchedule, stored with the pool since migration 014), for Go
// handlers and webhook workers alike. It is River's own hook,
// river.Config.RetryPolicy, which riverclient.Config installs with the
// middleware that passes a handler's workers.RetryAfterError on to it.
//
// # Which schedule
//
// A job's kind is its pool's name. Policy keeps the schedules of every pool
// in memory and reads them again when they are older than the refresh
// interval, so a `pool update` reaches every worker process within it. A
// kind that is no pool (a job of the application's own inserted into a
// pool's queue) gets River's default policy, attempt⁴ seconds. A worker's
// own NextRetry, when it returns a time, still wins: River asks the client's
// policy only when the worker has none.
//
// # Retry-After
//
// A handler that returns a workers.RetryAfterError (a webhook answered with
// a Retry-After header does) has its next attempt wait the longer of that
// delay and the schedule's, never beyond the pool's MaxDelay. River hands
// the policy only the job's row, as it was fetched: the attempt's error is
// not in it yet. So the middleware notes the delay, by job id and attempt,
// when the handler returns, and NextRetry, which River calls right after in
// the same goroutine, takes it.
package retry
