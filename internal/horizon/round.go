package horizon

import (
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
	Problems []Problem
	// Took is how long the round took, from taking a connection to its
	// commit.
	Took time.Duration

	pid uint32 // the backend that ran the round
	// announce: the round moved the horizon or found late events, which
	// the riverbus_horizon notification tells other instances.
	announce bool
}

// RoundParams are a round's settings.
type RoundParams struct {
	// GapTimeout is how long a gap may stay open before it is skipped.
	GapTimeout time.Duration
	// PageSize is how many visible sequences one round reads.
	PageSize int
	// RideFunc, when set, is called by a round that moves the horizon
	// from from to to and runs on a connection of its own: what it queues on
	// b is sent in the round's last round trip, after its COMMIT, so it
	// runs once the round has committed, in transactions of its own (the
	// fan-out sends there the batches of the pools that were at the old
	// horizon: one round trip less to each). done is called after that
	// round trip with its error (errRoundFailed when the round did not
	// commit, and then nothing queued ran).
	RideFunc func(from, to int64, b *pgx.Batch) (done func(err error))
	// AgeShift moves the database's clock forward for the gaps' ages: it
	// is added to the time a gap is first seen and to the time its age is
	// read. Zero (production) keeps the database's clock; tests set it
	// from a Clock to pass a gap timeout without waiting for it.
	AgeShift time.Duration
}

// Advance runs one horizon round (DESIGN.md §2) unless another instance is
// running one.
//
// On a *pgxpool.Pool it runs on a connection of its own and sends BEGIN
// with its first statements and COMMIT with its writes: a round that moves
// the horizon costs two round trips. On anything else (a transaction, say)
// it runs inside a transaction (or savepoint) begun on it.
func Advance(ctx context.Context, db database.DB, params RoundParams) (RoundResult, error) {
	began := time.Now()
	if pool, ok := db.(*pgxpool.Pool); ok {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return RoundResult{}, fmt.Errorf("horizon: %w", err)
		}
		// A connection left inside the transaction by an error is closed
		// on release, which rolls it back.
		defer c.Release()
		res, err := round(ctx, c.Conn(), true, params)
		if err != nil {
			return RoundResult{}, err
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

// errRoundFailed is what a RideFunc's done gets when the round did not
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
func round(ctx context.Context, q roundConn, own bool, params RoundParams) (RoundResult, error) {
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
		b.Queue(sqlHorizonUpdate, w.horizon, w.provenDead, late, skipFirst, skipLast, skipBound).QueryRow(func(row pgx.Row) error {
			return row.Scan(&res.Skipped, &res.Late)
		})
		if len(w.forgotten) > 0 {
			b.Queue(sqlSkippedDelete, w.forgotten)
		}
		// The riverbus_horizon notification is sent after the commit, in a
		// transaction of its own (Service.announce): a transaction that
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
			if res.Moved && params.RideFunc != nil {
				rideDone = params.RideFunc(in.horizon, w.horizon, b)
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

// RetireLateEvents deletes the records of late events that every pool has
// handled (and that no skipped range covers any more), with the pools'
// records of them. It returns how many late events it retired.
//
// It runs with the rounds' settings (database.TxSettingsSQL): JIT off, asynchronous
// commit.
func RetireLateEvents(ctx context.Context, db database.DB) (int64, error) {
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
