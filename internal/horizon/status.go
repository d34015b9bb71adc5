package horizon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
)

// Status is the shared horizon and its counters, totals over every
// instance since the database was created.
type Status struct {
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
	// Failovers counts the fences run (Fence); LastFailover is the latest,
	// nil when there was none.
	Failovers    int64
	LastFailover *Failover
}

// Get reads the horizon row, its counters and the problems
// CheckAssumptions reports. A missing row is bustype.ErrHorizonMissing.
func Get(ctx context.Context, db database.DB) (*Status, error) {
	var h Status
	err := db.QueryRow(ctx, sqlHorizonGet).Scan(&h.Horizon, &h.GapsProvenDead, &h.GapsSkipped, &h.LateEvents,
		&h.UpdatedAt, &h.OpenGaps, &h.Watching, &h.WatchingRanges, &h.LatePending, &h.Failovers)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, bustype.ErrHorizonMissing
	}
	if err != nil {
		return nil, fmt.Errorf("read horizon: %w", err)
	}
	if h.Problems, err = CheckAssumptions(ctx, db); err != nil {
		return nil, err
	}
	if h.Failovers > 0 {
		if h.LastFailover, err = LastFailover(ctx, db); err != nil {
			return nil, err
		}
	}
	return &h, nil
}

// RepairResult says what Repair did.
type RepairResult struct {
	// Created: the row was missing and is now there, at Horizon.
	Created bool
	// Horizon is the horizon after the repair.
	Horizon int64
}

// Repair recreates the riverbus_horizon row when it is missing, and
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
// late event (both were passed by the horizon), and where the log begins
// after event retention (retention deletes only what the horizon passed:
// starting lower would walk the deleted numbers as gaps). Starting at their maximum
// means no range is walked again, so no skipped range can ever overlap a
// new one. Above that it may take the lowest pool cursor, capped below the
// lowest open gap: a pool never reads at or below its cursor, so for every
// pool the new horizon changes nothing it reads until the horizon has walked
// past its cursor again; and every sequence above the lowest open gap's
// start stays unproven. With no pool, no range and no late event it is 0.
// The counters (gaps proven dead, skipped, late events) start again at 0.
func Repair(ctx context.Context, db database.DB) (RepairResult, error) {
	var res RepairResult
	err := db.QueryRow(ctx, sqlHorizonRepair).Scan(&res.Horizon)
	switch {
	case err == nil:
		res.Created = true
		return res, nil
	case errors.Is(err, pgx.ErrNoRows):
		h, err := Get(ctx, db)
		if err != nil {
			return res, fmt.Errorf("repair horizon: %w", err)
		}
		res.Horizon = h.Horizon
		return res, nil
	}
	return res, fmt.Errorf("repair horizon: %w", err)
}

// Renumbered is an event Renumber moved from Old to New.
type Renumbered struct {
	Old, New int64
}

// Renumber gives every event numbered above the sequence's last value (the
// problem event_above_sequence: a number that did not come from the assign
// trigger) the sequence's next number, lowest first, and returns what it
// moved; nothing else of the event changes. The horizon never passed such
// an event, so its pools receive it once, at its new number, and the
// sequence goes on from where it was however high the planted number. It
// takes the transaction's id before the first new number, as the assign
// trigger does (docs/design.md §1), and is refused while the sequence is below
// the horizon (new numbers would be ones no pool reads). It needs UPDATE
// on riverbus_event: the schema owner's. It is safe while riverbus runs.
func Renumber(ctx context.Context, db database.DB) ([]Renumbered, error) {
	rows, err := db.Query(ctx, sqlRenumber)
	if err != nil {
		return nil, fmt.Errorf("renumber events: %w", err)
	}
	moved, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Renumbered, error) {
		var r Renumbered
		err := row.Scan(&r.Old, &r.New)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("renumber events: %w", err)
	}
	return moved, nil
}
