// Package outbox appends events to the riverbus event log (riverbus_event)
// inside the application's own transaction, and reads them back.
//
// An event committed with the application's state change is fanned out as
// one River job per consumer pool; an event whose transaction rolls back was
// never there. See docs/design.md §1 (why the transaction id is taken before the
// sequence number).
//
// # Appending
//
// AppendTx appends events in the caller's transaction, Append in a
// transaction of its own. Either is one statement, whatever the number of
// events, and returns what the database assigned, in input order:
//
//	appended, err := outbox.AppendTx(ctx, tx,
//		outbox.Event{Type: "OrderPlaced", Key: orderID, Tags: []string{"order=" + orderID}, Data: data})
//
// The global sequence and the transaction id of an event are assigned by a
// trigger of the database, on every insert path (this package, plain SQL,
// COPY); an event id is generated (UUIDv7) when the caller leaves it zero,
// and the occurrence time is the database's now() when left zero.
//
// # Validation
//
// Events are checked before any SQL runs, by the rules the database's CHECK
// constraints enforce: a type of 1 to 255 characters, tags of the form
// name=value with a non-empty name, data that is valid JSON, metadata that
// is a JSON object or empty. A violation is a *ValidationError naming the
// event's index and the field; it matches ErrInvalidEvent, and nothing is
// written. A CHECK violation the database finds becomes a *ValidationError
// too.
//
// # Conditional appends
//
// AppendIfTx and AppendIf append only if an AppendCondition holds, in the
// manner of Dynamic Consistency Boundaries: read the events of a Query (Read),
// decide, and append on the condition that no event of that query was
// appended after the last one read (otherwise *ConflictError, ErrConflict),
// and that no event matches an idempotency query (otherwise *DuplicateError,
// ErrDuplicate). Conditional appenders serialize on transaction-level
// locks derived from the condition and the appended events, which only
// riverbus's roles can take (not advisory locks, which any login can), so
// exactly one of many concurrent appenders with the same condition succeeds.
// Plain appends take no locks; see AppendIfTx for what that means.
//
// # Two-phase commit
//
// Each append wakes the fan-out with a NOTIFY, and PostgreSQL refuses to
// PREPARE a transaction that has sent one. A writer that prepares its
// transactions calls SkipNotifyTx first (or sets riverbus.notify to off for
// its sessions); the fan-out then finds its events by polling once COMMIT
// PREPARED makes them visible.
//
// # Tracing
//
// An append with an active OpenTelemetry span in its context starts a
// producer span (riverbus.append) from the global tracer provider and
// stores its W3C trace context in each event's metadata under
// TraceParentKey and TraceStateKey, keeping any the caller set. The
// fan-out copies them into each job's metadata, so the handler's span
// continues the trace. Without a span in the context nothing is added.
//
// # Reading
//
// Read returns the committed events matching a Query, a key, or both, in
// sequence order, after a position and up to a limit, using the indexes on
// (type, global_sequence), (key, global_sequence) and the GIN index on tags.
//
// # Backfill
//
// Backfill turns an application's existing rows into events: the rows of a
// query (id, key, data, optionally tags and occurred_at), read in id order
// in keyset batches, each batch appended in a transaction of its own
// together with the backfill's progress (riverbus_backfill), so a run
// killed at any point and started again appends each row exactly once.
// Each event's id derives from the backfill's name and the row's id
// (BackfillEventID), and each carries the tag BackfillTag(name). See
// docs/backfill.md, and `riverbus backfill`.
//
// # Commands
//
// RecordCommandTx records the command that caused a transaction's events in
// riverbus_command, keyed by the transaction id the events carry.
package outbox
