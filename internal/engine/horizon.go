package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
)

// How the horizon proves a gap (DESIGN.md §2.1).
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

// Ranges: why the cost of a gap does not depend on its length (DESIGN.md
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
// should see it has handled it and no range covers it (RetireLateEvents).
//
// The pools' late path (sqlLateEvents) looks both in riverbus_late and
// inside the ranges, so a late event is delivered even before a round
// records it; riverbus_pool_late records, per pool and late sequence, that
// the pool has handled it (on the late path, or on its normal path when it
// read the event in order), so each pool gets it once. The plain path
// (plain.go) applies only when no late event can be pending: no row in
// riverbus_late and no committed event inside any range, in its snapshot;
// ranges holding only burned numbers leave it on.
//
// The round's transaction holds no Go-side work that grows with a gap: its
// reads return O(page + gaps + ranges) rows, and the writes are set-based
// statements whose cost is O(runs + events inside them).
//
// What the proof assumes, and what riverbus does when it does not hold
// (DESIGN.md §2.4).
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
// hide that. Fanout logs each problem at ERROR with its fix, and
// CheckAssumptions, HorizonStatus.Problems, `riverbus status` and the
// riverbus_horizon_problem metric show it.

// gapRow is an open gap: a run of missing sequences just above the horizon,
// seen while a higher sequence was visible.
type gapRow struct {
	first, last int64
	bound       uint64
	age         time.Duration
}

// skippedRange is a run of sequences passed by the gap timeout; newLate
// says the round's read saw a committed event inside it that is not yet
// recorded as late.
type skippedRange struct {
	first, last int64
	bound       uint64
	newLate     bool
}

// snapshot is what a round knows about running transactions.
type snapshot struct {
	xmax uint64
	xip  []uint64
}

// provesEnded reports whether every transaction with an xid below bound has
// ended, as seen in s.
func (s snapshot) provesEnded(bound uint64) bool {
	if bound >= s.xmax {
		return false
	}
	for _, x := range s.xip {
		if x < bound {
			return false
		}
	}
	return true
}

// walkInput is one round's view; walkResult is what it decides. walk is a
// pure function so the decision rules can be tested case by case.
type walkInput struct {
	horizon    int64
	snap       snapshot
	visible    []int64 // visible sequences above the horizon, ascending
	gaps       []gapRow
	skipped    []skippedRange
	gapTimeout time.Duration
	// noProof: an assumption of the proof is broken. Nothing is proven
	// dead, skipped or forgotten; contiguous visible sequences still pass.
	noProof bool
	// frozen: the sequence is below the horizon. The horizon does not move.
	frozen bool
}

type walkResult struct {
	horizon     int64
	newGaps     []gapRow // bound to be filled with the round's xid
	deadGaps    []int64  // first_sequence of gap rows passed (proven dead or skipped)
	provenDead  int64    // sequences passed because proven dead
	skip        []gapRow // runs passed by timeout, with their gap's bound
	skipped     int64    // missing sequences in them (as far as the page shows)
	late        []int64  // first of ranges with late events to record
	forgotten   []int64  // first of ranges now proven: to delete
	holding     bool     // the round stopped at an open gap
	oldestGapAt time.Duration
}

func walk(in walkInput) walkResult {
	res := walkResult{horizon: in.horizon}
	h := in.horizon
	i := 0
	for i < len(in.visible) && !in.frozen {
		if in.visible[i] <= h {
			i++
			continue
		}
		if in.visible[i] == h+1 {
			h++
			i++
			continue
		}
		// h+1 .. visible[i]-1 is missing while visible[i] is visible.
		next := h + 1
		g := findGap(in.gaps, next)
		if g == nil {
			res.holding = true
			break
		}
		// Missing in next..g.last: its length less what is visible in it.
		missing := g.last - next + 1 - countBetween(in.visible, next, g.last)
		switch {
		case in.noProof:
			res.holding = true
			res.oldestGapAt = g.age
		case in.snap.provesEnded(g.bound):
			// Every sequence of the run is visible or dead: pass it all.
			res.provenDead += missing
		case g.age >= in.gapTimeout:
			res.skip = append(res.skip, gapRow{first: next, last: g.last, bound: g.bound})
			res.skipped += missing
		default:
			res.holding = true
			res.oldestGapAt = g.age
		}
		if res.holding {
			break
		}
		res.deadGaps = append(res.deadGaps, g.first)
		h = g.last
	}
	res.horizon = h
	// Record every missing run above the horizon that no gap row covers yet,
	// all with this round's bound, so a burst of rollbacks is proven in the
	// next round instead of one gap per round.
	prev := h
	for _, v := range in.visible {
		if v <= h {
			continue
		}
		for s := prev + 1; s < v; {
			if g := findGap(in.gaps, s); g != nil {
				s = g.last + 1
				continue
			}
			end := v - 1
			for _, g := range in.gaps {
				if g.first > s && g.first <= end {
					end = g.first - 1
				}
			}
			res.newGaps = append(res.newGaps, gapRow{first: s, last: end})
			s = end + 1
		}
		prev = v
	}
	for _, s := range in.skipped {
		if s.newLate {
			res.late = append(res.late, s.first)
		}
		if !in.noProof && in.snap.provesEnded(s.bound) {
			res.forgotten = append(res.forgotten, s.first)
		}
	}
	return res
}

func findGap(gaps []gapRow, seq int64) *gapRow {
	for i := range gaps {
		if gaps[i].first <= seq && seq <= gaps[i].last {
			return &gaps[i]
		}
	}
	return nil
}

// countBetween counts the values of sorted within [lo, hi].
func countBetween(sorted []int64, lo, hi int64) int64 {
	a, _ := slices.BinarySearch(sorted, lo)
	b, found := slices.BinarySearch(sorted, hi)
	if found {
		b++
	}
	return int64(b - a)
}

// RoundResult says what one horizon round did.
type RoundResult struct {
	// Locked is false when another instance held the horizon: nothing was
	// done.
	Locked bool
	// Horizon is the horizon after the round.
	Horizon int64
	// Moved: the horizon went up.
	Moved bool
	// More: the round read a full page, so another round may move it more.
	More bool
	// Holding: the horizon waits at an open gap that a later round may
	// prove or time out: look again soon.
	Holding bool
	// Blocked: the horizon waits at an open gap because an assumption of
	// the proof is broken (Problems). No round passes it until that is
	// fixed, so there is no point in looking again before the poll
	// interval or a new event.
	Blocked bool
	// ProvenDead and Skipped count sequences passed (proven rolled back, or
	// by the gap timeout); Late counts events found late; Forgotten counts
	// skipped ranges proven and deleted.
	ProvenDead, Skipped, Late, Forgotten int64
	// Watching: there are skipped ranges still being watched, so rounds
	// must go on even when no event arrives.
	Watching bool
	// LatePending counts late events (found in earlier rounds) whose
	// record is not yet retired: some pool has still to handle them, on its
	// late path or on its normal one.
	LatePending int64
	// Problems are the broken assumptions of the gap proof the round saw.
	// While one that Blocks is present the round proves and skips nothing.
	Problems []Problem

	pid uint32 // the backend that ran the round (and sent its notification)
}

// AdvanceHorizon runs one horizon round (DESIGN.md §2) unless another
// instance is running one. gapTimeout is how long a gap may stay open before
// it is skipped; pageSize is how many visible sequences one round reads.
//
// On a *pgxpool.Pool it runs on a connection of its own and sends BEGIN
// with its first statements and COMMIT with its writes: a round that moves
// the horizon costs two round trips. On anything else (a transaction, say)
// it runs inside a transaction (or savepoint) begun on it.
func AdvanceHorizon(ctx context.Context, db database.DB, gapTimeout time.Duration, pageSize int) (RoundResult, error) {
	if pool, ok := db.(*pgxpool.Pool); ok {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return RoundResult{}, fmt.Errorf("horizon: %w", err)
		}
		// A connection left inside the transaction by an error is closed
		// on release, which rolls it back.
		defer c.Release()
		res, err := horizonRound(ctx, c.Conn(), true, gapTimeout, pageSize)
		if err != nil {
			return RoundResult{}, err
		}
		res.pid = c.Conn().PgConn().PID()
		return res, nil
	}
	var res RoundResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		res, err = horizonRound(ctx, tx, false, gapTimeout, pageSize)
		if err == nil {
			res.pid = tx.Conn().PgConn().PID()
		}
		return err
	})
	if err != nil {
		return RoundResult{}, err
	}
	return res, nil
}

// roundConn is what a round runs on: a connection or a transaction.
type roundConn interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// horizonRound is one round on q. With own set, q is a bare connection: the
// round begins and ends its transaction itself, in the same round trips as
// its first and last statements.
func horizonRound(ctx context.Context, q roundConn, own bool, gapTimeout time.Duration, pageSize int) (RoundResult, error) {
	var res RoundResult
	end := func() error {
		if !own {
			return nil
		}
		_, err := q.Exec(ctx, "COMMIT")
		return err
	}
	err := func() error {
		var (
			in                                walkInput
			horizon                           *int64
			xmaxText                          string
			xipText, gapBounds, skippedBounds []string
			gapFirst, gapLast                 []int64
			skippedFirst, skippedLast         []int64
			gapAges                           []float64
			skippedNewLate                    []bool
			problemCodes, problemDetails      []string
		)
		b := &pgx.Batch{}
		if own {
			b.Queue("BEGIN")
		}
		b.Queue(sqlTxSettings)
		b.Queue(sqlHorizonTryLock)
		b.Queue(sqlHorizonRead, pageSize)
		br := q.SendBatch(ctx, b)
		if own {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return err
			}
		}
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
		var locked string
		if err := br.QueryRow().Scan(&locked); err != nil {
			_ = br.Close()
			return fmt.Errorf("horizon lock: %w", err)
		}
		err := br.QueryRow().Scan(&horizon, &xmaxText, &xipText, &in.visible,
			&gapFirst, &gapLast, &gapBounds, &gapAges, &skippedFirst, &skippedLast, &skippedBounds, &skippedNewLate,
			&res.LatePending, &problemCodes, &problemDetails)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if locked != "true" {
			return end()
		}
		if err != nil {
			return fmt.Errorf("horizon read: %w", err)
		}
		if horizon == nil {
			return bustype.ErrHorizonMissing
		}
		in.horizon = *horizon
		res.Locked = true
		res.Problems = problems(problemCodes, problemDetails)
		for _, p := range res.Problems {
			if p.Blocks {
				in.noProof = true
			}
			if p.Code == ProblemSequenceBelowHorizon {
				in.frozen = true
			}
		}
		if in.snap.xmax, err = parseXid(xmaxText); err != nil {
			return err
		}
		if len(xipText) > 0 && (len(gapFirst) > 0 || len(skippedFirst) > 0) {
			// Running transactions that provably write no event cannot
			// hold a gap: leave them out of the proof.
			rows, err := q.Query(ctx, sqlPossibleWriters, xipText)
			if err != nil {
				return fmt.Errorf("horizon: classify running transactions: %w", err)
			}
			if xipText, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return fmt.Errorf("horizon: classify running transactions: %w", err)
			}
		}
		for _, t := range xipText {
			x, err := parseXid(t)
			if err != nil {
				return err
			}
			in.snap.xip = append(in.snap.xip, x)
		}
		for i := range gapFirst {
			b, err := parseXid(gapBounds[i])
			if err != nil {
				return err
			}
			in.gaps = append(in.gaps, gapRow{first: gapFirst[i], last: gapLast[i], bound: b,
				age: time.Duration(gapAges[i] * float64(time.Second))})
		}
		for i := range skippedFirst {
			b, err := parseXid(skippedBounds[i])
			if err != nil {
				return err
			}
			in.skipped = append(in.skipped, skippedRange{first: skippedFirst[i], last: skippedLast[i], bound: b,
				newLate: skippedNewLate[i]})
		}
		in.gapTimeout = gapTimeout

		w := walk(in)
		res.Horizon = w.horizon
		res.Moved = w.horizon > in.horizon
		res.More = len(in.visible) >= pageSize
		res.Holding = w.holding && !in.noProof
		res.Blocked = w.holding && in.noProof
		res.ProvenDead = w.provenDead
		res.Forgotten = int64(len(w.forgotten))
		res.Watching = len(in.skipped) > len(w.forgotten) || len(w.skip) > 0

		changed := res.Moved || len(w.newGaps) > 0 || len(w.late) > 0 || len(w.forgotten) > 0 || len(w.deadGaps) > 0
		if !changed {
			return end()
		}
		// Every write in one round trip. The first one assigns the round's
		// xid, after the snapshot above: every writer that could hold one of
		// the new gaps has a lower xid.
		b = &pgx.Batch{}
		if len(w.newGaps) > 0 {
			firsts := make([]int64, len(w.newGaps))
			lasts := make([]int64, len(w.newGaps))
			for i, g := range w.newGaps {
				firsts[i], lasts[i] = g.first, g.last
			}
			b.Queue(sqlGapInsert, firsts, lasts)
		}
		if len(w.deadGaps) > 0 || res.Moved {
			b.Queue(sqlGapDelete, w.deadGaps, w.horizon)
		}
		// Skipped runs carry the bound of the gap they came from; late
		// events are recorded before the ranges proven are deleted.
		skipFirst := make([]int64, len(w.skip))
		skipLast := make([]int64, len(w.skip))
		skipBound := make([]string, len(w.skip))
		for i, g := range w.skip {
			skipFirst[i], skipLast[i], skipBound[i] = g.first, g.last, strconv.FormatUint(g.bound, 10)
		}
		late := w.late
		if late == nil {
			late = []int64{}
		}
		b.Queue(sqlHorizonUpdate, w.horizon, w.provenDead, late, skipFirst, skipLast, skipBound).QueryRow(func(row pgx.Row) error {
			return row.Scan(&res.Skipped, &res.Late)
		})
		if len(w.forgotten) > 0 {
			b.Queue(sqlSkippedDelete, w.forgotten)
		}
		if res.Moved || len(w.late) > 0 {
			b.Queue(sqlHorizonNotify, strconv.FormatInt(w.horizon, 10))
		}
		if own {
			b.Queue("COMMIT")
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return bustype.ErrHorizonMissing // deleted since the read
			}
			return fmt.Errorf("horizon round: write: %w", err)
		}
		return nil
	}()
	if err != nil {
		return RoundResult{}, err
	}
	return res, nil
}

// bustype.ErrHorizonMissing is returned by rounds, batches and GetHorizon when the
// riverbus_horizon row is missing: nothing moves until RepairHorizon (the
// command `riverbus repair horizon`) recreates it.
var ErrHorizonMissing = bustype.ErrHorizonMissing

// RetireLateEvents deletes the records of late events that every pool has
// handled (and that no skipped range covers any more), with the pools'
// records of them. It returns how many late events it retired.
//
// It runs with the rounds' settings (sqlTxSettings): JIT off, asynchronous
// commit.
func RetireLateEvents(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlTxSettings); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sqlSkippedRetire).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("retire late events: %w", err)
	}
	return n, nil
}

// HorizonStatus is the shared horizon and its counters, totals over every
// instance since the database was created.
type HorizonStatus struct {
	Horizon        int64
	GapsProvenDead int64
	GapsSkipped    int64
	LateEvents     int64
	UpdatedAt      time.Time
	OpenGaps       int64 // open gap runs just above the horizon
	// Watching counts the sequences in skipped ranges still watched for a
	// late commit (those of them that committed, and are late events,
	// included); WatchingRanges counts the ranges.
	Watching       int64
	WatchingRanges int64
	// LatePending counts late events not yet handled by every pool.
	LatePending int64
	// Problems are the broken assumptions of the gap proof
	// (CheckAssumptions); empty when every one holds.
	Problems []Problem
}

// GetHorizon reads the horizon row, its counters and the problems
// CheckAssumptions reports. A missing row is bustype.ErrHorizonMissing.
func GetHorizon(ctx context.Context, db database.DB) (*HorizonStatus, error) {
	var h HorizonStatus
	err := db.QueryRow(ctx, sqlHorizonGet).Scan(&h.Horizon, &h.GapsProvenDead, &h.GapsSkipped, &h.LateEvents,
		&h.UpdatedAt, &h.OpenGaps, &h.Watching, &h.WatchingRanges, &h.LatePending)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, bustype.ErrHorizonMissing
	}
	if err != nil {
		return nil, fmt.Errorf("read horizon: %w", err)
	}
	if h.Problems, err = CheckAssumptions(ctx, db); err != nil {
		return nil, err
	}
	return &h, nil
}

// Problem codes: what breaks the gap proof's assumptions (horizon.go, "What
// the proof assumes").
const (
	ProblemSequenceCache         = "sequence_cache"
	ProblemSequenceIncrement     = "sequence_increment"
	ProblemSequenceCycle         = "sequence_cycle"
	ProblemSequenceBelowHorizon  = "sequence_below_horizon"
	ProblemAssignTriggerMissing  = "assign_trigger_missing"
	ProblemAssignTriggerDisabled = "assign_trigger_disabled"
	ProblemAssignTriggerChanged  = "assign_trigger_changed"
	ProblemNotifyTriggerMissing  = "notify_trigger_missing"
)

// ProblemCodes lists every problem code, for metrics that report each.
var ProblemCodes = []string{
	ProblemAssignTriggerChanged, ProblemAssignTriggerDisabled, ProblemAssignTriggerMissing,
	ProblemNotifyTriggerMissing, ProblemSequenceBelowHorizon, ProblemSequenceCache,
	ProblemSequenceCycle, ProblemSequenceIncrement,
}

// Problem is a broken assumption of the gap proof.
type Problem struct {
	// Code is one of the Problem* constants.
	Code string `json:"code"`
	// Message says what is wrong and what riverbus does about it.
	Message string `json:"message"`
	// Detail is what the database showed (the cache size, say).
	Detail string `json:"detail"`
	// Fix is what an operator runs to repair it.
	Fix string `json:"fix"`
	// Blocks: while it holds, the horizon proves and skips nothing (it
	// only passes contiguous committed events, and not even those when the
	// sequence is below the horizon).
	Blocks bool `json:"blocks"`
}

func (p Problem) String() string {
	return fmt.Sprintf("%s (%s): %s Fix: %s", p.Code, p.Detail, p.Message, p.Fix)
}

var problemTexts = map[string]struct {
	message, fix string
	blocks       bool
}{
	ProblemSequenceCache: {"riverbus_event_global_sequence caches numbers per session, so a missing number says nothing about when it was handed out; the horizon proves and skips no gap.",
		"ALTER SEQUENCE riverbus_event_global_sequence CACHE 1; then end the sessions that appended since the change (they may hold cached numbers)", true},
	ProblemSequenceIncrement: {"riverbus_event_global_sequence does not count by 1; the horizon proves and skips no gap.",
		"ALTER SEQUENCE riverbus_event_global_sequence INCREMENT BY 1", true},
	ProblemSequenceCycle: {"riverbus_event_global_sequence may cycle back below the horizon; the horizon proves and skips no gap.",
		"ALTER SEQUENCE riverbus_event_global_sequence NO CYCLE", true},
	ProblemSequenceBelowHorizon: {"riverbus_event_global_sequence hands out numbers at or below the horizon (setval backwards, or a damaged horizon): no pool reads events numbered there; the horizon does not move.",
		"SELECT setval('riverbus_event_global_sequence', greatest((SELECT max(global_sequence) FROM riverbus_event), (SELECT horizon FROM riverbus_horizon))); " +
			"events appended meanwhile are at or below the horizon: redeliver them with riverbus pool reset (README, \"What riverbus requires of the sequence\")", true},
	ProblemAssignTriggerMissing: {"riverbus_event has no trigger riverbus_event_assign: inserters choose the sequence and transaction id; the horizon proves and skips no gap.",
		"run riverbus migrate on a database where the trigger exists, or recreate it as migration 001 does", true},
	ProblemAssignTriggerDisabled: {"the trigger riverbus_event_assign is disabled: inserters choose the sequence and transaction id; the horizon proves and skips no gap.",
		"ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_assign", true},
	ProblemAssignTriggerChanged: {"the trigger riverbus_event_assign or its function is not the one riverbus created: the order xid-then-sequence is not guaranteed; the horizon proves and skips no gap.",
		"restore riverbus_event_assign() and its trigger as migration 001 creates them", true},
	ProblemNotifyTriggerMissing: {"riverbus_event has no enabled trigger riverbus_event_notify: new events wait for the poll interval (no effect on correctness).",
		"ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_notify, or recreate it as migration 001 does", false},
}

// ProblemBlocks reports whether the problem with code holds the horizon
// (every one but a missing notify trigger, and any code this version does
// not know).
func ProblemBlocks(code string) bool {
	t, ok := problemTexts[code]
	return !ok || t.blocks
}

func problems(codes, details []string) []Problem {
	if len(codes) == 0 {
		return nil
	}
	out := make([]Problem, len(codes))
	for i, c := range codes {
		t, ok := problemTexts[c]
		if !ok {
			t.message, t.blocks = "unknown problem", true
		}
		out[i] = Problem{Code: c, Detail: details[i], Message: t.message, Fix: t.fix, Blocks: t.blocks}
	}
	return out
}

// CheckAssumptions reports what breaks the assumptions of the gap proof:
// the sequence's cache, increment and cycle settings, its next number
// against the horizon, and the assign and notify triggers of
// riverbus_event. Empty when every one holds. Each horizon round runs the
// same check; this is for status pages and monitoring.
func CheckAssumptions(ctx context.Context, db database.DB) ([]Problem, error) {
	rows, err := db.Query(ctx, sqlAssumptionsList)
	if err != nil {
		return nil, fmt.Errorf("check assumptions: %w", err)
	}
	var codes, details []string
	var code, detail string
	_, err = pgx.ForEachRow(rows, []any{&code, &detail}, func() error {
		codes, details = append(codes, code), append(details, detail)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check assumptions: %w", err)
	}
	return problems(codes, details), nil
}

// problemLog logs the broken assumptions a round saw at ERROR: at once when
// the set of problems changes, then again every problemLogInterval while it
// lasts, and once at INFO when they are gone.
type problemLog struct {
	mu   sync.Mutex
	last string
	at   time.Time
}

const problemLogInterval = time.Minute

func (l *problemLog) log(logger *slog.Logger, ps []Problem) {
	codes := make([]string, len(ps))
	for i, p := range ps {
		codes[i] = p.Code
	}
	key := strings.Join(codes, ",")
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == l.last && (key == "" || time.Since(l.at) < problemLogInterval) {
		return
	}
	if key == "" {
		logger.Info("the gap proof's assumptions hold again; the horizon proves and skips gaps again", "was", l.last)
	}
	l.last, l.at = key, time.Now()
	for _, p := range ps {
		msg := "horizon: an assumption of the gap proof is broken"
		if p.Blocks {
			msg += "; the horizon proves and skips no gap until it is fixed"
		}
		logger.Error(msg, "problem", p.Code, "detail", p.Detail, "what", p.Message, "fix", p.Fix)
	}
}

// RepairHorizonResult says what RepairHorizon did.
type RepairHorizonResult struct {
	// Created: the row was missing and is now there, at Horizon.
	Created bool
	// Horizon is the horizon after the repair.
	Horizon int64
}

// RepairHorizon recreates the riverbus_horizon row when it is missing, and
// leaves an existing row alone. It needs INSERT on riverbus_horizon (the
// schema owner's; the worker role may only move the row). It is safe while
// any number of fan-outs run: the row is inserted by one statement, and
// until then every round and batch fails with bustype.ErrHorizonMissing.
//
// The value it picks cannot skip anything. Say H was the horizon before the
// row was lost: every sequence at or below H is visible, proven dead or in a
// skipped range. Any value V <= H keeps that true, and a round that starts at
// V walks (V, H] again: visible sequences pass, missing ones become gaps and
// are proven again (or skipped and watched). The largest values known to be
// at or below H are the last sequence of any skipped range and the highest
// late event (both were passed by the horizon). Starting at their maximum
// means no range is walked again, so no skipped range can ever overlap a
// new one. Above that it may take the lowest pool cursor, capped below the
// lowest open gap: a pool never reads at or below its cursor, so for every
// pool the new horizon changes nothing it reads until the horizon has walked
// past its cursor again; and every sequence above the lowest open gap's
// start stays unproven. With no pool, no range and no late event it is 0.
// The counters (gaps proven dead, skipped, late events) start again at 0.
func RepairHorizon(ctx context.Context, db database.DB) (RepairHorizonResult, error) {
	var res RepairHorizonResult
	err := db.QueryRow(ctx, sqlHorizonRepair).Scan(&res.Horizon)
	switch {
	case err == nil:
		res.Created = true
		return res, nil
	case errors.Is(err, pgx.ErrNoRows):
		h, err := GetHorizon(ctx, db)
		if err != nil {
			return res, fmt.Errorf("repair horizon: %w", err)
		}
		res.Horizon = h.Horizon
		return res, nil
	}
	return res, fmt.Errorf("repair horizon: %w", err)
}

func parseXid(s string) (uint64, error) {
	x, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse xid %q: %w", s, err)
	}
	return x, nil
}
