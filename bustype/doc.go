// Package bustype holds riverbus's vocabulary: the types that the client
// (package riverbus), the producer side (package outbox), handlers (package
// workers) and webhooks share — events, pools and their settings, the job
// envelopes, dead letters, checkpoints — and the errors they return.
//
// It is a leaf package, like River's rivertype: it imports neither River nor
// pgx, so any package can use it without pulling in the engine.
//
// # Enums
//
// Pool settings are typed strings (Ordering, Grouping, DeadLetterPolicy,
// PoolStatus). Each has a Valid method and a Parse function that returns an
// error naming the accepted values, so a bad setting is refused before it
// reaches the database.
package bustype
