// Package riverbus makes a PostgreSQL event log horizontally scalable.
// Applications append events in their own transactions (package outbox);
// a riverbus Client turns each committed event, in contiguous
// global-sequence order, into one River job per consumer pool, and works
// those jobs with plain River workers bound to their pools. Any number of
// processes may run a Client against one database: they share the fan-out
// and the jobs without a leader.
//
// # Client
//
// NewClient takes a pgxpool.Pool and a Config; Start runs everything a
// riverbus process runs (the horizon, the fan-out of every active pool,
// checkpoint advancing, lane sweeps, late-event retirement, event
// retention under the operator's policy (Config.Retention) and, when
// Config.Workers is set, River workers for the pools), and Stop ends it.
// The same Client is the operator API: pools (PoolCreate, PoolGet,
// PoolList, PoolUpdate, PoolPause, PoolResume, PoolReset, PoolDelete,
// EventTypesAbsent), replays (PoolReplayStart, PoolReplayWait), dead letters (DeadLetterList, DeadLetterGet, DeadLetterRetry,
// DeadLetterRetryPool, DeadLetterPurge, DeadLetterPurgePool), checkpoints
// (CheckpointGet, CheckpointHolder, CheckpointWait), event retention
// (RetentionSet, RetentionPolicy, RetentionPlan, RetentionTrim) and a
// status snapshot (Status). Operator methods need no Start.
//
// Build the pool with ConfigurePool when a DBA may limit the database's or
// the role's sessions (ALTER DATABASE … SET statement_timeout): it gives
// every connection riverbus's own statement, lock and idle-in-transaction
// limits, and Start refuses a pool whose sessions are limited below them
// (*bustype.SessionLimitError).
//
// # Behind a connection pooler
//
// Appends (package outbox) and operator methods work through a pooler in
// transaction mode such as PgBouncer, with default_query_exec_mode=exec in
// the pool's URL (pgx's cached prepared statements do not survive one
// before PgBouncer 1.21's max_prepared_statements). A Client that runs the
// fan-out or workers needs a session of its own (LISTEN, River's leader
// election and notifier): its Start, and migrations.Up, refuse such a pool
// with an error matching ErrTransactionPooler. Give them a direct or
// session-mode pool.
//
// # Handlers
//
// A handler is a River worker whose args embed workers.Args (or
// workers.GroupArgs) and whose Kind is the pool's name. workers.Add binds it
// to its pool: the Client works the pool's River queue with it, and Start
// refuses, with an error that says why, a pool that does not exist or a
// queue that holds pools this Client has no handler for.
//
// # Testing
//
// Package riverbustest runs an application's handler tests against a real
// PostgreSQL: a fresh migrated database per test, a Client stopped with the
// test, and a wait for a pool to reach a sequence. This package's examples
// run that way.
//
// Each concept has one home: the event is outbox.Event, a pool job's args
// workers.Args, a checkpoint checkpoint.Status; the rest of the vocabulary
// (pools and their settings, dead letters, errors) is in package bustype.
// docs/design.md in the repository explains the guarantees.
package riverbus
