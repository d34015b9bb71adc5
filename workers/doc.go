// Package workers helps write the handlers of riverbus pools, which are plain
// River workers.
//
// A pool turns every matching event into one River job whose kind is the
// pool's name, whose queue, max attempts and priority are the pool's, and
// whose args are the event envelope (Args). A handler is an ordinary
// river.Worker over an args type that embeds Args and whose Kind is the pool
// name; River brings retries (on the pool's retry schedule), timeouts,
// rescue of jobs whose worker died, pausing, cancelling and River UI. This
// package adds what an event consumer needs on top.
//
// # Sections
//
//   - Args: what a pool job carries, and the args type of a handler
//   - Registry: binding handlers to pools (Add, Registry)
//   - Decode: the event's data as a Go value
//   - Upcasting: handlers of the current version of an evolving event type
//   - Exactly once: CompleteTx and RunExactlyOnce
//   - Client settings: Config
//   - A River client of your own: RiverConfig, NewDriver
//   - Big events: SkipPayloads, PayloadRead
//   - Retries: the pool's schedule, RetryAfter
//   - Dead letters: what becomes of a job that used up its attempts
//
// # Args
//
// A handler's args type embeds Args and names its pool:
//
//	type BillingArgs struct{ workers.Args }
//
//	func (BillingArgs) Kind() string { return "billing" }
//
// The handler then reads job.Args.GlobalSequence, job.Args.Type,
// job.Args.Key and so on without another query. Late is true for an event
// that committed after the horizon had given up waiting for it, and was
// therefore delivered after events with higher sequences.
//
// A pool created with --group transaction gets one job per application
// transaction instead, whose args embed GroupArgs: the transaction's events
// in sequence order.
//
// # Registry
//
// A Registry holds the handlers of a riverbus.Client, one per pool. Add
// binds a handler to the pool its args' Kind names, with AddOpts.MaxWorkers
// jobs of the pool at once; pass the registry in riverbus.Config.Workers:
//
//	reg := workers.NewRegistry()
//	workers.Add(reg, &BillingWorker{}, &workers.AddOpts{MaxWorkers: 20})
//	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: reg})
//
// The Client's Start binds each pool's River queue and refuses a pool that
// does not exist or a queue holding pools without a handler here.
//
// # Decode
//
// Decode and DecodeStrict turn the event's data into a Go value. A failure is
// a *DecodeError, an ordinary error: River retries the job and, after its
// last attempt, discards it, which makes it a dead letter. Nothing is ever
// skipped silently; do not wrap a DecodeError in river.JobCancel unless
// losing the event is really what you want.
//
// # Upcasting
//
// Every event records the version of its type's data that its appender
// wrote (outbox.Event.Version, 1 for a type's first). When a type changes
// in a way its handlers must know, appenders write the next version, and
// the registry gets an upcaster that turns the previous version's data
// into the new one; upcasters from 1 and from 2 make a chain that brings
// old events to version 3:
//
//	reg.Upcast("OrderPlaced", 1, renameItemToSKU) // 1 → 2
//	reg.Upcast("OrderPlaced", 2, addQuantity)     // 2 → 3
//
// Before a handler runs, each event of its job is brought to the version
// its registry knows of its type (the highest its chain reaches, or
// EventVersion's), one step at a time, and Event.Version says that
// version; a webhook bound with webhook.Bind sends events the same way.
// The stored event and the job's args are never rewritten: River UI and
// `riverbus dlq show` show the event as appended. An event of a type the
// registry has no version for reaches its handler as stored.
//
// An upcaster that fails (returns an error, panics, or returns data that
// is not JSON) fails the job with an *UpcastError naming the event, the
// versions and the cause. Like a DecodeError it is retried on the pool's
// schedule (a fixed upcaster, deployed meanwhile, then takes it) and,
// after the last attempt, becomes a dead letter with that reason: never a
// skipped event. So does an event newer than the version the registry
// knows (ErrVersionTooNew): a worker older than the appender does not hand
// it to a handler that cannot read it, and a newer worker can take it on a
// retry, or from the dead letter. Hence the deploy order: workers first,
// with the new upcaster, then the appenders of the new version
// (docs/evolving-events.md).
//
// # Exactly once
//
// River runs a job at least once: a worker that dies after doing its work
// but before River records the completion runs again. When the handler's
// effect is in the same database, RunExactlyOnce makes it exactly once: it
// runs the handler's function and marks the job completed in one
// transaction, so either both happen or neither does, and a job that is
// already completed is not run again.
//
// # Client settings
//
// Config holds the River settings of a riverbus.Client's workers
// (riverbus.Config.Work): settings fit for an event bus — fast fetching, a
// job timeout with prompt rescue, and dead letters kept. Each field of
// Config documents its default and why.
//
// # A River client of your own
//
// An application that runs its own River client over pool jobs, rather
// than a riverbus.Client, builds its river.Config with RiverConfig (the same
// settings, retry policy, lane hand-off of ordered pools and payload
// reading a riverbus.Client uses) and its driver with NewDriver, River's
// pgx driver whose listener acts on a control message only when the
// database confirms it.
//
// # Big events
//
// A job of an event whose data and metadata are too big to copy into it
// holds a reference to the log instead; a hook that RiverConfig installs
// reads the payload before River decodes the args, so a handler always gets
// whole events. A worker that reads the events from the log itself (the
// webhook does) says so with SkipPayloads in its middleware, and takes one
// of the process's PayloadReadsMax reads of big payloads with PayloadRead.
//
// # Retries
//
// A failed job is attempted again on its pool's retry schedule
// (bustype.RetrySchedule, set with `riverbus pool create|update
// --retry-*`), which RiverConfig installs as the River client's retry
// policy; a `pool update` reaches every worker process within
// Config.RetryRefreshInterval. A handler that knows better, say from a rate limit's reset
// time, returns RetryAfter(err, d): the next attempt waits at least d, at
// most the pool's maximum delay. A handler's own NextRetry method, when it
// returns a time, wins over both (River's rule).
//
// # Dead letters
//
// A pool job that used up its attempts is discarded by River. A trigger
// keeps a copy of it in riverbus_dead_letter (a bustype.DeadLetter), so it
// survives River's job cleaner, until an operator puts it back to work or
// gives up on it: riverbus.Client's DeadLetterList, DeadLetterRetry,
// DeadLetterRetryPool (a pool's in global sequence order), DeadLetterPurge
// and DeadLetterPurgePool, or `riverbus dlq`. A retry from River UI (River's
// JobRetry) works too. None of them needs a running River client.
package workers
