// Package fanout is the stage that turns committed events into River jobs,
// one per event per matching pool, with no leader and no lost or duplicated
// events. It advances the horizon and fans each pool out to it. A started
// riverbus.Client runs it (its Config.Fanout is this package's Config, and
// each of Fanout.Services runs in a goroutine of the client's); Fanout.Run
// runs it alone, and Fanout.Pass does one step of it for tests and
// benchmarks. docs/design.md §2 and §3 give the design and its proof.
//
// # Sections
//
//   - Horizon: how far the log is proven (round.go, walk.go,
//     horizonservice.go)
//   - Pools: what becomes a job of which pool
//   - Fan-out: one batch of one pool (batch.go, plain.go, group.go,
//     insert.go)
//   - Services: the long-running parts and what wakes them
//
// # Horizon
//
// The horizon is the highest global sequence H such that every sequence up
// to H is visible, proven never to commit, or skipped by the gap timeout and
// watched. A gap (a missing sequence below a visible one) is passed at once
// when a snapshot proves every transaction that could hold it has ended, and
// after Config.GapTimeout otherwise. A skipped sequence that commits later
// is a late event: delivered to every pool that passed it, flagged late (the
// late path of batch.go). docs/design.md §2 gives the proof and what it
// assumes of the sequence; internal/horizon holds the facts operators read
// (assumptions, status, repair, the failover fence).
//
// A round runs in one transaction: whichever instance gets the round's lock
// does it and the others skip theirs. The walk (walk.go) decides, from one
// read, where the horizon goes; the round (round.go) writes it. A round
// that moves the horizon carries in its last round trip the batches of the
// plain pools that were at the old horizon (ride.go), and then counts
// itself and wakes the pools and the late-event retirer (Fanout.roundDone).
// Every Config.MarkInterval, the statement that moves the horizon also
// records when the events up to it had committed by (a mark), which resets
// of a pool to a time resolve against (docs/design.md §11).
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
// Each pool is fanned out on its own, one batch at a time, each batch in
// one transaction: lock the pool row FOR UPDATE SKIP LOCKED, read
// its events in (cursor, H], insert their jobs, move the cursor, commit. A
// batch takes at most Config.BatchSize events and stops before the one whose
// stored bytes would take it past Config.BatchBytes (always taking one),
// late events included. Only the events' heads (sequence, type, key, tags,
// transaction, trace context, size) come to this process: the database
// builds each job's args from the event's row as it inserts it, so an
// appender's event size never sets the fan-out's memory. Any number of
// processes may run the fan-out against one database; a pool's batches
// never overlap. An event that cannot become a job (JSON nested too deep for
// encoding/json, an envelope too big for jsonb) becomes a dead letter of the
// pool with the reason, and the batch goes on (docs/design.md §3).
//
// # Services
//
// A fan-out process runs services (Fanout.Services), each with a Run(ctx)
// and test signals: the horizon (HorizonService), the pools' fan-out
// (PoolService: each pool on its own, its failures backing off alone), the
// lane sweeper (lanes.Sweeper), the late-event retirer (Retirer), and the
// Listener that wakes the horizon on LISTEN riverbus_event and the pools on
// riverbus_horizon (another instance's round); each move of the horizon by
// this instance's round starts a batch of every pool it knows at once, and
// Config.PollInterval covers lost notifications. The test-signal types
// (HorizonTestSignals, PoolTestSignals, RetirerTestSignals) are for tests
// of other packages that wait for what a service did.
package fanout
