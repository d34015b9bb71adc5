// Package horizon holds the horizon's facts that operators and the status
// read: the proof's assumptions (CheckAssumptions, Problem), the horizon
// row (Get), its repairs (Repair, Renumber) and the failover fence (Fence,
// LastFailover). The horizon is the highest global sequence H such that
// every sequence up to H is visible, proven never to commit, or skipped by
// the gap timeout and watched; package fanout advances it (its round,
// walk and horizon service) and reads each pool's events in (cursor, H].
// This file explains the proof both packages rely on.
//
// # Files
//
//   - problems.go: the proof's assumptions (CheckAssumptions, Problem).
//   - status.go: the horizon row for operators (Get, Repair, Renumber).
//   - failover.go: the failover fence (Fence, LastFailover): on a new WAL
//     timeline, no number the old one delivered is given to another event
//     (docs/design.md §2.8, migration 020).
//   - In package fanout: walk.go, the pure decision of a round (no
//     database); round.go, one round against the database (its lock, its
//     one read, walk, its writes) and the retirement of late events;
//     horizonservice.go, the services that run them in a loop, with their
//     test signals, and the test clock (Clock).
//
// # Rounds
//
// A round (package fanout's advance) moves the horizon one step; whichever
// instance gets the round's lock (a table lock only riverbus_worker may take) does the round and the
// others skip it. A gap (a missing sequence below a visible one) is passed
// at once when the snapshot proves every transaction that could hold it
// has ended, and after the gap timeout otherwise. Gaps and skipped
// sequences are kept as ranges, so a gap costs the same whatever its
// length. A skipped sequence that commits later is a late event: the
// fan-out delivers it to every pool that passed it, flagged late, and
// the fan-out's retirer forgets it once every pool has.
//
// The proof assumes a sequence with CACHE 1, INCREMENT BY 1, NO CYCLE and
// its next number above the horizon, and the assign trigger of migration
// 001 in place. Each round checks them; while one is broken it proves and
// skips nothing. CheckAssumptions reports them. Repair recreates a deleted
// horizon row.
//
// # Clocks
//
// A gap's age is measured by the database's clock alone (first_seen_at and
// clock_timestamp() in the same server), so the clocks of the instances
// never matter (docs/design.md). Tests move that clock forward with a
// fanout.Clock (roundParams.AgeShift) instead of sleeping through a gap timeout.
package horizon

// How the horizon proves a gap (docs/design.md §2.1).
//
// A writer takes its xid X before its sequence g (the trigger calls
// pg_current_xact_id() before nextval()). Suppose a snapshot S1 shows g
// missing while some h > g is visible. nextval(g) < nextval(h) < commit of
// h < S1, so X was assigned before S1 was taken.
//
// The snapshot's xmax, pg_snapshot_xmax(S1), is not a sound bound:
// xmax is latestCompletedXid+1, and a running X above every completed xid
// is at or above xmax and is listed in no xip, so it would look ended. (Two
// writers are enough: G takes xid 100 then sequence 5, H has xid 99 and
// takes sequence 6, commits; xmax(S1) = 100 and G is invisible to the test.)
//
// riverbus records instead an xid B assigned to the round's own transaction
// after S1 (the round takes no xid before: its lock is a table lock,
// not a row lock). X < B because X was assigned before S1. In a later round
// with snapshot S2, B has committed, so xmax(S2) > B > X, and a running X
// is listed in xip(S2) (the round again holds no xid of its own yet). So
// when no xid in xip(S2) is below B, X has ended; g still not visible in
// S2 means X rolled back: g is proven dead.
//
// One refinement keeps unrelated long transactions from stalling the proof
// (Watermill's and Crablet's xmin rule stalls behind any of them): a writer
// holds a RowExclusiveLock on riverbus_event from before it takes its
// sequence until it ends, so an xid whose transaction pg_locks shows running
// without that lock, or running in another database, cannot be X and is
// left out of xip(S2) (sqlPossibleWriters). pg_locks must be read once for
// this, and the xid still be in progress after the read: X seen running in
// one read and, committed meanwhile, without its lock in another would be
// left out while g is not yet visible in S2, and g "proven" dead.

// Ranges: why the cost of a gap does not depend on its length (docs/design.md
// §2.3).
//
// A gap is a run of missing sequences, recorded as one riverbus_gap row
// (first, last, bound) whatever its length; a jump of 10^15 by setval is one
// row. walk never loops over the numbers of a run: it counts what a run
// passes as its length minus the visible sequences inside it (a binary
// search in the page it read), and it passes a run as a whole. Every
// sequence of a run was handed out before its bound was assigned (the
// proof above holds for each of them), so one proof covers the run.
//
// A run passed by the gap timeout becomes skipped ranges (riverbus_skipped,
// one row per run of still missing sequences): the statement that records
// them splits the run around the events committed inside it as that
// statement sees them. Those events are visible before the round commits the
// new horizon, so every pool reads them on its normal path; what is left in
// the ranges was missing when the round passed it. So a committed event
// inside a range is, by construction, a late event: it committed after the
// horizon passed it, and a pool may have moved its cursor past it without
// reading it. Nothing else about a range is needed: a range may be partly
// late (the transaction that burned 100,000 numbers commits one event), and
// only its committed sequences are late events.
//
// A round records in riverbus_late every committed event inside a range
// that the read saw there and that is not yet recorded (the read finds such
// ranges with one index probe each). A range is forgotten (deleted) once
// every transaction below its bound has ended (the same proof as a gap's):
// from then on nothing inside it can commit. The round that forgets a range
// records its late events first, in an earlier statement of the same
// transaction, with a snapshot at least as new as the proof's, which saw
// every commit of the range's writers. So no late event is forgotten with
// its range. A late event stays in riverbus_late until every pool that
// should see it has handled it and no range covers it (fanout's
// retireLateEvents).
//
// The pools' late path (fanout's sqlLateEvents) looks both in riverbus_late and
// inside the ranges, so a late event is delivered even before a round
// records it; riverbus_pool_late records, per pool and late sequence, that
// the pool has handled it (on the late path, or on its normal path when it
// read the event in order), so each pool gets it once. The plain path
// (fanout's plain.go) applies only when no late event can be pending: no row in
// riverbus_late and no committed event inside any range, in its snapshot;
// ranges holding only burned numbers leave it on.
//
// The round's transaction holds no Go-side work that grows with a gap: its
// reads return O(page + gaps + ranges) rows, and the writes are set-based
// statements whose cost is O(runs + events inside them).
//
// What the proof assumes, and what riverbus does when it does not hold
// (docs/design.md §2.4).
//
// The proof needs the sequence to hand numbers out in time order (nextval
// of g before nextval of h means g < h) and every event's number to be
// taken by riverbus_event_assign after its xid. That is: CACHE 1 (with a
// cache, a session hands out numbers it reserved earlier, after higher
// ones were committed by others: a missing number below a visible one then
// says nothing about when its writer took it), INCREMENT BY 1 and NO CYCLE
// (the walk expects consecutive numbers; a cycle hands out numbers below
// the horizon), the sequence's next number above the horizon (a setval
// backwards hands out numbers below it, which no pool will ever read: every
// cursor is at or above the horizon's old value), and the assign trigger in
// place, enabled and unchanged (without it the inserter chooses the
// sequence, in any order). The notify trigger is only a wake-up: without it
// delivery waits for the poll interval, which the proof does not depend on;
// it is reported but does not hold the horizon.
//
// Each round reads these (sqlAssumptions, a few catalog lookups by key, in
// the same statement as its snapshot). While one that the proof needs is
// broken, the round proves nothing and skips nothing: no gap is proven
// dead, none passes by timeout, no skipped range is forgotten. It still
// passes visible sequences that follow the horizon without a hole (they are
// committed; passing them assumes nothing) and still records late events
// (a committed event in a range is late whatever the sequence does). When
// the sequence is below the horizon the round does not move at all: the
// new events get numbers at or below the horizon, and moving on would only
// hide that.
//
// Every event's number must also come from the sequence: an event numbered
// above the sequence's last value (inserted with the trigger disabled or
// in replica mode; before migration 017, through a temporary sequence of
// the sequence's name, which the trigger then found first) is a number the
// sequence will still hand out. Passing it would make every number below
// it a gap that no running writer holds, "proven" dead while the sequence
// has yet to give those numbers to the next appends. So the round reads
// visible sequences only up to the sequence's last value, read after its
// snapshot (every event that took its number from the sequence is at or
// below it), and reports the rest (event_above_sequence). The proof is
// untouched for everything below: no number above the last value was
// handed out by the sequence, so none is in any gap. Renumber gives such
// events numbers from the sequence.
//
// The fanout's HorizonService logs each problem at ERROR with its fix, and
// CheckAssumptions, Status.Problems, `riverbus status` and the
// riverbus_horizon_problem metric show it.
