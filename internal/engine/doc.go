// Package engine turns committed events into River jobs, one per event per
// matching pool, with no leader and no lost or duplicated events.
//
// # Horizon
//
// The pools read their events up to the horizon H, which internal/horizon
// advances: every sequence up to H is visible, proven never to commit, or
// skipped by the gap timeout and watched. A skipped sequence that commits
// later is a late event: the fan-out delivers it to every pool that passed
// it, flagged late (the late path of batch.go).
//
// # Pools
//
// A pool is a named consumer group (internal/pools): its name is the River
// job kind, and every event matching its type and tag filters becomes one
// job. A transaction-grouped pool (bustype.GroupTransaction) gets one job
// per application transaction instead, holding its matching events after
// the pool's start point, cut into parts when it is very large (group.go).
// An ordered pool's jobs run one at a time per lane (internal/lanes).
//
// # Fan-out
//
// FanOutPool runs one batch of one pool in one transaction: lock the pool
// row FOR UPDATE SKIP LOCKED, read its events in (cursor, H], insert their
// jobs, move the cursor, commit. A batch takes at most
// fanout.Config.BatchSize events and stops before the one whose stored
// bytes would take it past BatchBytes (always taking one), late events
// included. Only the events' heads (sequence, type, key, tags, transaction,
// trace context, size) come to this process: the database builds each
// job's args from the event's row as it inserts it, so an appender's event
// size never sets the fan-out's memory. An event that cannot become a job
// (JSON nested too deep for encoding/json, an envelope too big for jsonb)
// becomes a dead letter of the pool with the reason, and the batch goes on.
//
// # Services
//
// A fan-out process runs services (Fanout.Services), each with a Run(ctx)
// and test signals: the horizon (horizon.Service), the pools' fan-out
// (PoolService: each pool on its own, its failures backing off alone), the
// lane sweeper (lanes.Sweeper), the late-event retirer (horizon.Retirer),
// and the Listener that wakes the horizon on LISTEN riverbus_event and the
// pools on riverbus_horizon (another instance's round); each move of the
// horizon by this instance's round starts a batch of every pool it knows
// at once, and a poll interval covers lost notifications. The checkpoint
// advancer (CheckpointAdvancer) runs beside them. riverbus.Client.Start runs
// each; Fanout.Run runs the fan-out's, and Fanout.Pass does one step of
// them all for tests.
package engine
