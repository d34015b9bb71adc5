// Package deadletters lists, retries and purges dead letters: the pool jobs
// River discarded after their last attempt. The client (riverbus.Client's
// DeadLetterX methods) and the CLI call it.
//
// A trigger (migrations/sql/002_fanout.up.sql) copies every discarded pool
// job into riverbus_dead_letter, so it survives River's job cleaner; a retry
// from River UI or River's JobRetry deletes the copy (migration 009). List
// and Get read them; Retry and RetryPool put them back to work (a pool's in
// global sequence order, ordered pools' jobs back in line in their lanes);
// Purge and PurgePool give up on them and release the lanes they blocked.
// None of them needs a running River client: they notify River's producers
// the way River does after an insert.
//
// # Locking
//
// Retry and purge lock river_job rows before riverbus_dead_letter rows, the
// order of every trigger that writes a dead letter while River updates its
// job; the other order could deadlock with River UI (see queries.go).
//
// # Undeliverable events
//
// An event the fan-out could not turn into a job becomes a dead letter whose
// args are a stub: the envelope without its payload, and the reason. Retry
// rebuilds the envelope from the event's row in riverbus_event (which an
// operator may have repaired) and, when it still cannot be encoded, leaves
// the dead letter with bustype.RetryUndeliverable.
package deadletters
