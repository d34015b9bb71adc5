// Package lanes keeps the order of ordered pools' jobs: one lane per event
// key (a key-ordered pool) or one for the whole pool (a globally ordered
// one), and at most one job per lane out of River's `pending` state and
// unfinished. The other jobs of a lane wait as `pending` until the lane
// hands on to them, lowest sequence first.
//
// # Where each piece of the protocol lives
//
// In this package (the Go side):
//
//   - lock.go: the lane of an event (Of) and of a job (Metadata,
//     MetadataKey); the fan-out's exclusive locks on the lanes' buckets
//     (Lock: try-lock all, else wait in bucket order for at most 100 ms and
//     step back); which lanes are busy under those locks (Busy); and the
//     decision, job by job, between `available` and `pending` (Decider).
//     The fan-out's batch (package fanout, insert.go) calls them.
//   - sweep.go: the safety net, a service beside the fan-out (Sweeper):
//     due retries of lane jobs made available at once (PromoteRetries),
//     and lanes left with pending jobs and none in flight released
//     (ReleaseStuck).
//   - handoff.go: River worker middleware (Handoff) that completes
//     succeeded lane jobs at once, grouped into one statement per flush
//     as group commit groups WAL writes, so the database hands their
//     lanes on without waiting for River's batched completer; in queues
//     of ordered pools, which get twice their River slots, it caps the
//     handlers running at once (NewHandoff). workers.RiverConfig
//     installs it.
//
// In the database (migrations, by name):
//
//   - 003: riverbus_lane_bucket (a lane's bucket, one of 128 per pool),
//     riverbus_lane_lock_class (the buckets' advisory lock class, unused
//     since 012), riverbus_release_lane (one lane; since 005 a call of
//     riverbus_release_lanes), the riverbus_job_lane index (a lane's
//     unfinished jobs in order), the row function riverbus_lane_finished
//     behind the riverbus_lane_deleted trigger (a job deleted in flight
//     releases its lane), and riverbus_dead_letter_keep with the
//     riverbus_dead_letter_lane index (a dead letter remembers its lane; in
//     a pool that blocks on dead letters it holds the lane).
//   - 005: riverbus_release_lanes (every given lane at once: bucket locks
//     shared in bucket order, then each free lane's lowest pending job made
//     available and River's producers woken), the trigger
//     riverbus_lane_finished made a statement trigger calling
//     riverbus_lanes_finished (every job a statement finished releases its
//     lane, whoever finished it), and the
//     riverbus_job_lane_busy index (in-flight lane jobs only).
//   - 009: riverbus_job_back_to_work (a lane job put back to work by
//     anyone, River UI or River's client API, goes back in line as
//     `pending`, and a dead letter put back to work stops holding its
//     lane); riverbus_release_lanes and riverbus_lanes_finished redefined
//     to work with it.
//   - 012: riverbus_lane_lock (the buckets as rows, which only
//     riverbus_worker may lock) with riverbus_lane_lock_rows (its rows made
//     for every pool), and riverbus_release_lanes taking the bucket row
//     locks FOR SHARE with bounded waits.
//
// Elsewhere in Go:
//
//   - the fan-out's batch (package fanout) gives each unit its lane (the
//     pool's ordering) and inserts pending or available jobs as the
//     Decider says;
//   - retrying a dead letter puts its job back in line (`pending`) and
//     calls riverbus_release_lanes; purging one releases the lane it held
//     (the dead-letter code behind Client.DeadLetterRetry and
//     Client.DeadLetterPurge);
//   - checkpoint.Holder reports, for a pending holder, what its lane waits
//     for (LaneBlocker), and `riverbus status` shows it.
package lanes
