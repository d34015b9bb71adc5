package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/migrations"
)

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
	Problems []horizon.Problem
	// Took is how long the round took, from taking a connection to its
	// commit.
	Took time.Duration

	pid uint32 // the backend that ran the round
	// announce: the round moved the horizon or found late events, which
	// the riverbus_horizon notification tells other instances.
	announce bool
}

// roundParams are a round's settings.
type roundParams struct {
	// GapTimeout is how long a gap may stay open before it is skipped.
	GapTimeout time.Duration
	// PageSize is how many visible sequences one round reads.
	PageSize int
	// Rides, when set, is the fan-out whose batches ride on a round that
	// moves the horizon and runs on a connection of its own: the round
	// calls Rides.ride(from, to, b), and what that queues on b is sent in
	// the round's last round trip, after its COMMIT, so it runs once the
	// round has committed, in transactions of its own (the fan-out sends
	// there the batches of the pools that were at the old horizon: one
	// round trip less to each). The done it returns is called after that
	// round trip with its error (errRoundFailed when the round did not
	// commit, and then nothing queued ran).
	Rides *Fanout
	// Fast makes a round on a pool try the one-round-trip round first
	// (roundFast): it commits a move over the contiguous run above the
	// horizon in the round trip of its read, and runs the full round only
	// when the read shows more to do (a gap to record, prove or skip, late
	// events, ranges to forget).
	Fast bool
	// Head, when HeadKnown, is the horizon the caller last saw, and Step
	// how far the last round moved it: the fast round, which does not know
	// the horizon before its round trip, lets the pools at Head ride as
	// if the round moved it from Head to Head+Step.
	Head, Step int64
	HeadKnown  bool
	// Code is the newest schema version this code knows: the round's first
	// statement (migrations.SQLSchemaCheck) refuses, with a
	// *migrations.SchemaTooNewError, when the schema needs newer code, and
	// the round then changes nothing. Zero means migrations.Newest().
	Code int
	// MarkInterval is how long after the last mark of when events
	// committed by (sqlHorizonMark) a round that moves the horizon writes
	// the next. Zero writes one with every such round (tests); the fan-out
	// sets Config.MarkInterval.
	MarkInterval time.Duration
	// MarkCap is the most marks kept (0: markCapDefault).
	MarkCap int64
	// AgeShift moves the database's clock forward for the gaps' ages: it
	// is added to the time a gap is first seen and to the time its age is
	// read. Zero (production) keeps the database's clock; tests set it
	// from a Clock to pass a gap timeout without waiting for it.
	AgeShift time.Duration
}

// markCapDefault is the default of roundParams.MarkCap: with a mark every
// MarkIntervalDefault, about 116 days of marks while events never stop
// (an idle log writes none), some 150 MB (docs/design.md §11). Retention
// deletes them with the events first, on any log it trims sooner.
const markCapDefault = 2_000_000

func (p roundParams) markCap() int64 { return cmp.Or(p.MarkCap, markCapDefault) }

// advance runs one horizon round (docs/design.md §2) unless another instance is
// running one.
//
// On a *pgxpool.Pool it runs on a connection of its own and sends BEGIN
// with its first statements and COMMIT with its writes: a round that moves
// the horizon costs two round trips; with params.Fast, a round that only
// passes committed sequences with no hole costs one (roundFast). On anything else (a transaction, say)
// it runs inside a transaction (or savepoint) begun on it.
func advance(ctx context.Context, db database.DB, params roundParams) (RoundResult, error) {
	began := time.Now()
	if pool, ok := db.(*pgxpool.Pool); ok {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return RoundResult{}, fmt.Errorf("horizon: %w", err)
		}
		// A connection left inside the transaction by an error is closed
		// on release, which rolls it back.
		defer c.Release()
		var (
			res  RoundResult
			full = true
		)
		if params.Fast {
			if res, full, err = roundFast(ctx, c.Conn(), params); err != nil {
				return RoundResult{}, err
			}
		}
		if full {
			fast := res
			if res, err = round(ctx, c.Conn(), true, params); err != nil {
				if !fast.Moved {
					return RoundResult{}, err
				}
				// The move committed: report it (its pools must run); the
				// next round meets the error again if it lasts.
				res = fast
			}
			res.Moved = res.Moved || fast.Moved
			res.announce = res.announce || fast.announce
		}
		res.pid = c.Conn().PgConn().PID()
		res.Took = time.Since(began)
		return res, nil
	}
	var res RoundResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		res, err = round(ctx, tx, false, params)
		if err == nil {
			res.pid = tx.Conn().PgConn().PID()
		}
		return err
	})
	if err != nil {
		return RoundResult{}, err
	}
	res.Took = time.Since(began)
	return res, nil
}

// queueSchemaCheck queues the round's first statement, which refuses when
// the schema needs newer code than params.Code (readResult.scan reads it).
// It comes before the round's lock: migrate takes the check's lock first
// too (migrations.Up), so neither waits for the other holding the other's.
func queueSchemaCheck(b *pgx.Batch, params roundParams) {
	b.Queue(migrations.SQLSchemaCheck, cmp.Or(params.Code, migrations.Newest()))
}

// errRoundFailed is what a ride's done gets when the round did not
// commit.
var errRoundFailed = errors.New("horizon round did not commit")

// roundConn is what a round runs on: a connection or a transaction.
type roundConn interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// round is one round on q. With own set, q is a bare connection: the round
// begins and ends its transaction itself, in the same round trips as its
// first and last statements.
func round(ctx context.Context, q roundConn, own bool, params roundParams) (RoundResult, error) {
	var res RoundResult
	end := func() error {
		if !own {
			return nil
		}
		_, err := q.Exec(ctx, "COMMIT")
		return err
	}
	err := func() error {
		b := &pgx.Batch{}
		if own {
			b.Queue("BEGIN")
		}
		queueSchemaCheck(b, params)
		b.Queue(database.TxSettingsSQL)
		b.Queue(sqlHorizonTryLock)
		b.Queue(sqlHorizonRead, params.PageSize, params.AgeShift.Seconds())
		br := q.SendBatch(ctx, b)
		if own {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return err
			}
		}
		var r readResult
		err := r.scan(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if !r.locked {
			return end()
		}
		in, err := r.input(func(xip []string) ([]string, error) {
			rows, err := q.Query(ctx, sqlPossibleWriters, xip)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		})
		if err != nil {
			return err
		}
		res.Locked = true
		res.LatePending = r.latePending
		res.Problems = r.problems
		in.gapTimeout = params.GapTimeout

		w := walk(in)
		res.Horizon = w.horizon
		res.Moved = w.horizon > in.horizon
		res.More = len(in.visible) >= params.PageSize
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
			b.Queue(sqlGapInsert, firsts, lasts, params.AgeShift.Seconds())
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
		b.Queue(sqlHorizonUpdate, w.horizon, w.provenDead, late, skipFirst, skipLast, skipBound,
			params.MarkInterval.Seconds(), params.markCap()).QueryRow(func(row pgx.Row) error {
			return row.Scan(&res.Skipped, &res.Late)
		})
		if len(w.forgotten) > 0 {
			b.Queue(sqlSkippedDelete, w.forgotten)
		}
		// The riverbus_horizon notification is sent after the commit, in a
		// transaction of its own (HorizonService.announce): a transaction that
		// notifies takes a lock at commit that every notifying
		// transaction takes (appends among them) and holds it through its
		// WAL flush, and the round is on the path of every event.
		res.announce = res.Moved || len(w.late) > 0
		var rideDone func(error)
		committed := !own
		if own {
			b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
				committed = ct.String() == "COMMIT"
				return nil
			})
			if res.Moved && params.Rides != nil {
				rideDone = params.Rides.ride(in.horizon, w.horizon, b)
			}
		}
		err = q.SendBatch(ctx, b).Close()
		if rideDone != nil {
			rerr := err
			if !committed {
				rerr = errRoundFailed
			}
			rideDone(rerr)
		}
		if err != nil && !committed {
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

// retireLateEvents deletes the records of late events that every pool has
// handled (and that no skipped range covers any more), with the pools'
// records of them. It returns how many late events it retired.
//
// It runs with the rounds' settings (database.TxSettingsSQL): JIT off, asynchronous
// commit.
func retireLateEvents(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, database.TxSettingsSQL); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sqlSkippedRetire).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("retire late events: %w", err)
	}
	return n, nil
}

func parseXid(s string) (uint64, error) {
	x, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse xid %q: %w", s, err)
	}
	return x, nil
}

// readResult is what a round's first round trip returns: whether it got
// the lock, and the read (sqlHorizonRead).
type readResult struct {
	locked                            bool
	horizon                           *int64
	xmaxText                          string
	xipText, gapBounds, skippedBounds []string
	visible                           []int64
	gapFirst, gapLast                 []int64
	skippedFirst, skippedLast         []int64
	gapAges                           []float64
	skippedNewLate                    []bool
	latePending                       int64
	problems                          []horizon.Problem
}

// scan reads the settings statement's, the try-lock's and the read's
// results from br.
func (r *readResult) scan(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		if tooNew := migrations.AsSchemaTooNew(err); tooNew != nil {
			return tooNew
		}
		return fmt.Errorf("horizon round: check the schema: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	var locked string
	if err := br.QueryRow().Scan(&locked); err != nil {
		return fmt.Errorf("horizon lock: %w", err)
	}
	r.locked = locked == "true"
	var problemCodes, problemDetails []string
	err := br.QueryRow().Scan(&r.horizon, &r.xmaxText, &r.xipText, &r.visible,
		&r.gapFirst, &r.gapLast, &r.gapBounds, &r.gapAges, &r.skippedFirst, &r.skippedLast, &r.skippedBounds, &r.skippedNewLate,
		&r.latePending, &problemCodes, &problemDetails)
	if !r.locked {
		return nil // the read returns no row without the lock
	}
	if err != nil {
		return fmt.Errorf("horizon read: %w", err)
	}
	if r.horizon == nil {
		return bustype.ErrHorizonMissing
	}
	r.problems = horizon.ProblemsOf(problemCodes, problemDetails)
	return nil
}

// input is the walk's input from the read. writers, when the proof needs
// it, narrows the running transactions to those that may write events
// (sqlPossibleWriters); nil keeps them all, which proves less.
func (r *readResult) input(writers func(xip []string) ([]string, error)) (walkInput, error) {
	in := walkInput{horizon: *r.horizon, visible: r.visible}
	for _, p := range r.problems {
		if p.Blocks {
			in.noProof = true
		}
		if p.Code == horizon.ProblemSequenceBelowHorizon {
			in.frozen = true
		}
	}
	var err error
	if in.snap.xmax, err = parseXid(r.xmaxText); err != nil {
		return in, err
	}
	xipText := r.xipText
	if writers != nil && len(xipText) > 0 && (len(r.gapFirst) > 0 || len(r.skippedFirst) > 0) {
		// Running transactions that provably write no event cannot
		// hold a gap: leave them out of the proof.
		if xipText, err = writers(xipText); err != nil {
			return in, fmt.Errorf("horizon: classify running transactions: %w", err)
		}
	}
	for _, t := range xipText {
		x, err := parseXid(t)
		if err != nil {
			return in, err
		}
		in.snap.xip = append(in.snap.xip, x)
	}
	for i := range r.gapFirst {
		b, err := parseXid(r.gapBounds[i])
		if err != nil {
			return in, err
		}
		in.gaps = append(in.gaps, gapRow{first: r.gapFirst[i], last: r.gapLast[i], bound: b,
			age: time.Duration(r.gapAges[i] * float64(time.Second))})
	}
	for i := range r.skippedFirst {
		b, err := parseXid(r.skippedBounds[i])
		if err != nil {
			return in, err
		}
		in.skipped = append(in.skipped, skippedRange{first: r.skippedFirst[i], last: r.skippedLast[i], bound: b,
			newLate: r.skippedNewLate[i]})
	}
	return in, nil
}

// roundFast is a round in one round trip: BEGIN, the try-lock and the read
// as a full round sends them, then sqlHorizonFast, which passes the run of
// committed sequences just above the horizon (no proof needed: nothing is
// missing in it), COMMIT, and the batches riding on it. The read is
// walked afterwards, and full says whether the walk found what only a
// full round does: a gap to record, prove or skip, late events to record,
// skipped ranges to forget. Then the caller runs one, in a transaction of
// its own, from a fresh read.
func roundFast(ctx context.Context, c *pgx.Conn, params roundParams) (res RoundResult, full bool, _ error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	queueSchemaCheck(b, params)
	b.Queue(database.TxSettingsSQL)
	b.Queue(sqlHorizonTryLock)
	b.Queue(sqlHorizonRead, params.PageSize, params.AgeShift.Seconds())
	b.Queue(sqlHorizonFast, params.PageSize, params.MarkInterval.Seconds(), params.markCap())
	b.Queue("COMMIT")
	var rideDone func(error)
	if params.Rides != nil && params.HeadKnown {
		rideDone = params.Rides.ride(params.Head, params.Head+max(params.Step, 1), b)
	}
	br := c.SendBatch(ctx, b)
	var (
		r         readResult
		committed bool
		fastTo    int64
		moved     bool
	)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := r.scan(br); err != nil {
			return err
		}
		switch err := br.QueryRow().Scan(&fastTo); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("horizon round: move: %w", err)
		default:
			moved = true
		}
		ct, err := br.Exec()
		if err != nil {
			return err
		}
		committed = ct.String() == "COMMIT"
		return nil
	}()
	// Close runs the rides' callbacks (they are transactions of their
	// own, run whether or not the round committed).
	if cerr := br.Close(); err == nil && !committed {
		err = cerr
	}
	if rideDone != nil {
		rerr := err
		if rerr == nil && !committed {
			rerr = errRoundFailed
		}
		rideDone(rerr)
	}
	if err != nil {
		return RoundResult{}, false, err
	}
	if !committed {
		return RoundResult{}, false, errRoundFailed
	}
	if !r.locked {
		return RoundResult{}, false, nil
	}
	in, err := r.input(nil)
	if err != nil {
		return RoundResult{}, false, err
	}
	in.gapTimeout = params.GapTimeout
	w := walk(in)
	res = RoundResult{Locked: true, Horizon: in.horizon, LatePending: r.latePending, Problems: r.problems,
		More: len(in.visible) >= params.PageSize}
	if moved {
		res.Horizon, res.Moved, res.announce = fastTo, true, true
	}
	// The walk ran on every running transaction, not only the possible
	// writers (sqlPossibleWriters), so it may hold where the full round
	// proves: a gap it holds at, and skipped ranges still watched (which
	// exist only after a gap timeout), take the full round too.
	full = (w.holding && !in.noProof) || len(in.skipped) > 0 || len(w.newGaps) > 0 || len(w.late) > 0 ||
		len(w.forgotten) > 0 || len(w.deadGaps) > 0 || w.horizon > res.Horizon
	res.Holding = w.holding && !in.noProof
	res.Blocked = w.holding && in.noProof
	res.Watching = len(in.skipped) > 0
	return res, full, nil
}
