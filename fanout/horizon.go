package fanout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
// after S1 (the round takes no xid before: its lock is an advisory lock,
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

// gapRow is an open gap: a run of missing sequences just above the horizon,
// seen while a higher sequence was visible.
type gapRow struct {
	first, last int64
	bound       uint64
	age         time.Duration
}

type skippedRow struct {
	seq     int64
	bound   uint64
	visible bool
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
	skipped    []skippedRow // skipped and not yet late
	gapTimeout time.Duration
}

type walkResult struct {
	horizon     int64
	newGaps     []gapRow // bound to be filled with the round's xid
	deadGaps    []int64  // first_sequence of gap rows passed (proven dead or skipped)
	provenDead  int64    // sequences passed because proven dead
	skip        []int64  // sequences to record as skipped
	skipBounds  []uint64
	late        []int64 // skipped sequences now visible
	forgotten   []int64 // skipped sequences now proven dead
	holding     bool    // the round stopped at an open gap
	pageFull    bool    // visible had as many rows as asked for: more may follow
	oldestGapAt time.Duration
}

func walk(in walkInput) walkResult {
	res := walkResult{horizon: in.horizon}
	h := in.horizon
	i := 0
	for i < len(in.visible) {
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
		switch {
		case in.snap.provesEnded(g.bound):
			// Every sequence of the run is visible or dead: pass it all.
			for s := next; s <= g.last; s++ {
				if !contains(in.visible, s) {
					res.provenDead++
				}
			}
		case g.age >= in.gapTimeout:
			for s := next; s <= g.last; s++ {
				if !contains(in.visible, s) {
					res.skip = append(res.skip, s)
					res.skipBounds = append(res.skipBounds, g.bound)
				}
			}
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
		switch {
		case s.visible:
			res.late = append(res.late, s.seq)
		case in.snap.provesEnded(s.bound):
			res.forgotten = append(res.forgotten, s.seq)
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

func contains(sorted []int64, v int64) bool {
	lo, hi := 0, len(sorted)
	for lo < hi {
		m := (lo + hi) / 2
		if sorted[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(sorted) && sorted[lo] == v
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
	// Holding: the horizon waits at an open gap.
	Holding bool
	// ProvenDead, Skipped, Late, Forgotten count sequences by what happened.
	ProvenDead, Skipped, Late, Forgotten int64
	// Watching: there are skipped sequences still being watched, so rounds
	// must go on even when no event arrives.
	Watching bool
	// LatePending counts late events (marked in earlier rounds) whose
	// record is not yet retired: some pool has still to handle them, on its
	// late path or on its normal one.
	LatePending int64

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
func AdvanceHorizon(ctx context.Context, db DB, gapTimeout time.Duration, pageSize int) (RoundResult, error) {
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
			xmaxText                          string
			xipText, gapBounds, skippedBounds []string
			gapFirst, gapLast, skippedSeqs    []int64
			gapAges                           []float64
			skippedVisible                    []bool
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
		err := br.QueryRow().Scan(&in.horizon, &xmaxText, &xipText, &in.visible,
			&gapFirst, &gapLast, &gapBounds, &gapAges, &skippedSeqs, &skippedBounds, &skippedVisible, &res.LatePending)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if locked != "true" {
			return end()
		}
		if err != nil {
			return fmt.Errorf("horizon read: %w", err)
		}
		res.Locked = true
		if in.snap.xmax, err = parseXid(xmaxText); err != nil {
			return err
		}
		if len(xipText) > 0 && (len(gapFirst) > 0 || len(skippedSeqs) > 0) {
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
		for i := range skippedSeqs {
			b, err := parseXid(skippedBounds[i])
			if err != nil {
				return err
			}
			in.skipped = append(in.skipped, skippedRow{seq: skippedSeqs[i], bound: b, visible: skippedVisible[i]})
		}
		in.gapTimeout = gapTimeout

		w := walk(in)
		res.Horizon = w.horizon
		res.Moved = w.horizon > in.horizon
		res.More = len(in.visible) >= pageSize
		res.Holding = w.holding
		res.ProvenDead = w.provenDead
		res.Skipped = int64(len(w.skip))
		res.Late = int64(len(w.late))
		res.Forgotten = int64(len(w.forgotten))
		res.Watching = len(in.skipped)-len(w.late)-len(w.forgotten) > 0 || len(w.skip) > 0 || len(w.late) > 0

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
		// Skipped sequences carry the bound of the gap they came from.
		for i := 0; i < len(w.skip); {
			j := i
			for j < len(w.skip) && w.skipBounds[j] == w.skipBounds[i] {
				j++
			}
			b.Queue(sqlSkippedInsert, w.skip[i:j], strconv.FormatUint(w.skipBounds[i], 10))
			i = j
		}
		if len(w.late) > 0 {
			b.Queue(sqlSkippedMarkLate, w.late)
		}
		if len(w.forgotten) > 0 {
			b.Queue(sqlSkippedDelete, w.forgotten)
		}
		b.Queue(sqlHorizonUpdate, w.horizon, w.provenDead, int64(len(w.skip)), int64(len(w.late)))
		if res.Moved || len(w.late) > 0 {
			b.Queue(sqlHorizonNotify, strconv.FormatInt(w.horizon, 10))
		}
		if own {
			b.Queue("COMMIT")
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("horizon round: write: %w", err)
		}
		return nil
	}()
	if err != nil {
		return RoundResult{}, err
	}
	return res, nil
}

// RetireLateEvents deletes the records of late events that every pool has
// handled.
//
// It runs with the rounds' settings (sqlTxSettings): JIT off, asynchronous
// commit.
func RetireLateEvents(ctx context.Context, db DB) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlTxSettings); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlSkippedRetire)
		n = tag.RowsAffected()
		return err
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
	Watching       int64 // skipped sequences not (yet) committed
}

// GetHorizon reads the horizon row.
func GetHorizon(ctx context.Context, db DB) (*HorizonStatus, error) {
	var h HorizonStatus
	err := db.QueryRow(ctx, sqlHorizonGet).Scan(&h.Horizon, &h.GapsProvenDead, &h.GapsSkipped, &h.LateEvents,
		&h.UpdatedAt, &h.OpenGaps, &h.Watching)
	if err != nil {
		return nil, fmt.Errorf("read horizon: %w", err)
	}
	return &h, nil
}

func parseXid(s string) (uint64, error) {
	x, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse xid %q: %w", s, err)
	}
	return x, nil
}
