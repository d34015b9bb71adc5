package fanout

import (
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Riding on the round: a round that moves the horizon from H to H' hands
// the fan-out its last round trip (roundParams.Rides), and the
// fan-out queues there, after the round's COMMIT, the batches of the plain
// pools whose cursor was H: each is its own transaction, exactly the
// plain path's (plain.go), run once the round has committed, so it reads
// (H, H']. An event's jobs are then inserted in the round trip that
// passes it, instead of one more round trip after the pools' service has
// been woken. sqlPoolsDue runs last in that round trip, so it finds the
// pools that rode at the new horizon and the pools' service does not run
// them again for the move; a ride that did not complete (the pool locked
// by another instance, a full batch, an error) leaves the pool to it, as
// if nothing had ridden.

// rideMaxPools bounds the batches one round carries, so that a round that
// many pools wait on is not held up by them: the others take the pools'
// service, as pools behind the horizon do.
const rideMaxPools = 4

// rideMaxSequences is the most sequences a round may pass and still carry
// batches. The next round waits for the batches a round carries; a round
// that passes many events (a busy log) has batches worth running beside
// the next round instead, on the pools' service. A ride saves a batch its
// round trip and wake-up, which matters when a round passes a few events;
// when it passes dozens, the batches are long enough that the next round,
// which every pool waits for, would wait for them too.
const rideMaxSequences = 16

// sqlRideLimits bounds a ride's waits. The round's connection runs its
// rides one after another and the horizon service waits for them, so a
// pool whose insert waits (a lock some trigger or session of the
// application holds, River's GIN pending list being merged) held up the
// horizon, and with it every pool, for as long as it waited. A ride that
// waits longer gives up: it rolls back, the rides queued after it do not
// run, and each of those pools is left to the pools' service, which waits
// for it in that pool's own goroutine (TestFailingPoolDoesNotDelayOthers
// failed about one run in eight before). A ride normally takes a
// millisecond or two.
const sqlRideLimits = `SELECT set_config('lock_timeout', '50ms', true), set_config('statement_timeout', '200ms', true)`

// rideRecent: when more plain pools are at the old horizon than may ride,
// those whose batches inserted jobs within this time ride, the latest
// first; the others would mostly find nothing (hundreds of pools whose
// filters match other events), and wait for the pools' service only if
// sqlPoolsDue finds their events.
const rideRecent = time.Second

// ride queues on b the plain batches of the pools at from (the horizon
// before the round), then sqlPoolsDue, and returns what reads their
// results. The pools' service learns from the latter which pools the move
// concerns (due.go).
func (f *Fanout) ride(from, to int64, b *pgx.Batch) func(error) {
	start := time.Now()
	var calls []*plainCall
	if to-from <= rideMaxSequences {
		// Else the pools' service takes them, beside the next round.
		calls = f.queueRides(b, from)
	}
	due := queueDue(b, f.gate.Code(), false, sqlRideLimits)
	return func(err error) {
		for _, c := range calls {
			if !c.committed {
				// Not run, or rolled back: the pools' service runs the pool
				// (and meets the error again, if it lasts, on its own path).
				f.mu.Lock()
				delete(f.heads, c.name)
				f.mu.Unlock()
				continue
			}
			res, _, _, _ := f.plainDone(c, nil)
			if c.locked && c.applied && !c.big {
				f.batchDone(res)
				f.batchTelemetry(res, start, "ride", c.traceparents)
				f.services.Pools.rode(res)
			}
		}
		if due.ran && due.committed {
			f.dueDone(due.res)
			f.services.Pools.setDue(due.res)
		}
	}
}

// queueRides queues on b the plain batches of the pools at from, at most
// rideMaxPools (and Workers) of them, and returns them.
func (f *Fanout) queueRides(b *pgx.Batch, from int64) []*plainCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noPlain {
		return nil
	}
	var names []string
	for name, cursor := range f.heads {
		if kind := f.plain[name]; cursor == from && (kind == plainAll || kind == plainTyped) {
			names = append(names, name)
		}
	}
	if n := min(rideMaxPools, f.cfg.Workers); len(names) > n {
		now := time.Now()
		names = slices.DeleteFunc(names, func(name string) bool { return now.Sub(f.jobsAt[name]) > rideRecent })
		slices.SortFunc(names, func(a, b string) int { return f.jobsAt[b].Compare(f.jobsAt[a]) })
		names = names[:min(n, len(names))]
	}
	calls := make([]*plainCall, len(names))
	for i, name := range names {
		calls[i] = f.queuePlain(b, name, f.plain[name], true)
	}
	return calls
}

// horizon is the latest horizon this instance's rounds reached.
func (f *Fanout) horizon() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats.Horizon
}

// rode reports a batch that rode on a round as the pools' service reports
// its own; its jobs count towards the next ANALYZE of river_job, which the
// pools' service's next batch starts.
func (s *PoolService) rode(res BatchResult) {
	s.TestSignals.BatchDone.Signal(res)
	s.analyzer.count(res.Jobs)
}
