package fanout

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Which pools need a batch. A batch of a pool whose filter matches no
// event in (cursor, horizon] inserts nothing and only moves the cursor;
// with hundreds of pools, a batch of each on every horizon move made one
// pool's event wait behind hundreds of empty batches, and an idle
// fan-out run one transaction per pool per poll. So the pools' service
// asks one statement (sqlPoolsDue) which pools need a batch: those with a
// matching event above their cursor, those too far behind to judge
// cheaply, and every pool while late events may be pending (their late
// path needs its batch). It moves the cursors of the others to the
// horizon in the same statement, as their batch would have, for all of
// them at once and only when they last moved idleCursorInterval ago: so
// an idle pool costs a row update a few times a second at most, whatever
// the rate of horizon moves. A round that moves the horizon sends the
// statement in its last round trip (ride.go), so the pools' service knows
// which pools to run without a round trip of its own.

const (
	// dueWindow: a pool whose cursor is more sequences than this below the
	// horizon needs a batch whatever its filter (its batch reads the
	// range through the indexes). Above it, the statement reads the heads
	// of the events of the window, at most this many.
	dueWindow = 4096
	// idleCursorLag: an idle pool's cursor is moved up at once when it is
	// more sequences than this below the horizon, so that the window the
	// statement reads stays small under load, and an idle pool's lag stays
	// below the 1,000 events of the RiverbusPoolLagGrowing alert.
	idleCursorLag = 512
	// idleCursorInterval: an idle pool's cursor is moved up when it last
	// moved this long ago; until then it stays a little below the horizon
	// (checkpoints and lag follow it), and the statement judges the pool
	// again at each move. The pools' service looks again after it when it
	// left idle pools below the horizon.
	idleCursorInterval = 250 * time.Millisecond
)

// sqlPoolsDue judges every active pool from one snapshot, moves the
// cursors of idle pools, and returns: the horizon it judged at, the pools
// that need a batch, those whose cursor it moved to the horizon, whether
// it left idle pools below the horizon (they move later), and, when $4,
// every active pool.
//
// A pool needs no batch when its cursor is at the horizon, or when no
// event in (cursor, horizon] matches its filter: the events of the window
// are grouped by type and tags, each group with its highest sequence, so
// a pool matches when a group matching its filter goes above its cursor.
// Every event at or below the horizon committed before the horizon moved
// past it, so the snapshot sees them all; late events (sqlNoLateEvents)
// make every pool due, as does a missing horizon row (the batches report
// it). The cursor of an idle pool moves only from the value judged (the
// lock rechecks it on the row's latest version, so a reset that commits
// meanwhile is never overwritten) and under the pool row's lock, skipped
// when a batch holds it. $1 dueWindow, $2 idleCursorInterval, $3
// idleCursorLag.
const sqlPoolsDue = `WITH h AS MATERIALIZED (
	SELECT (SELECT horizon FROM riverbus_horizon) AS horizon, ` + sqlNoLateEvents + ` AS exact
),
p AS MATERIALIZED (
	SELECT p.name, p.cursor_seq, p.event_types, p.tags, p.updated_at,
		h.exact AND h.horizon IS NOT NULL AND p.cursor_seq >= h.horizon - $1 AS judged
	FROM riverbus_pool p, h
	WHERE p.status = 'active' AND (h.horizon IS NULL OR NOT h.exact OR p.cursor_seq < h.horizon)
),
ev AS MATERIALIZED (
	SELECT e.type, e.tags, max(e.global_sequence) AS last
	FROM riverbus_event e
	WHERE e.global_sequence > (SELECT min(cursor_seq) FROM p WHERE judged)
		AND e.global_sequence <= (SELECT horizon FROM h)
	GROUP BY e.type, e.tags
),
j AS MATERIALIZED (
	SELECT p.*, NOT p.judged OR EXISTS (
		SELECT 1 FROM ev
		WHERE ev.last > p.cursor_seq AND ev.tags @> p.tags
			AND (cardinality(p.event_types) = 0 OR ev.type = ANY (p.event_types))) AS due
	FROM p
),
lk AS (
	SELECT r.name FROM riverbus_pool r JOIN j ON j.name = r.name
	WHERE NOT j.due AND (j.updated_at <= now() - $2::interval OR j.cursor_seq < (SELECT horizon FROM h) - $3)
		AND r.cursor_seq = j.cursor_seq AND r.status = 'active'
	ORDER BY r.name
	FOR NO KEY UPDATE OF r SKIP LOCKED
),
adv AS (
	UPDATE riverbus_pool r SET cursor_seq = h.horizon, updated_at = now()
	FROM lk, h WHERE r.name = lk.name
	RETURNING r.name
)
SELECT (SELECT horizon FROM h),
	coalesce((SELECT array_agg(name ORDER BY name) FROM j WHERE due), '{}'),
	coalesce((SELECT array_agg(name) FROM adv), '{}'),
	EXISTS (SELECT 1 FROM j WHERE NOT due AND name NOT IN (SELECT name FROM adv)),
	CASE WHEN $4 THEN coalesce((SELECT array_agg(name ORDER BY name) FROM riverbus_pool WHERE status = 'active'), '{}') END`

// dueResult is what sqlPoolsDue returned.
type dueResult struct {
	horizon  *int64   // nil: the horizon row is missing
	due      []string // the pools that need a batch
	advanced []string // the idle pools whose cursor it moved to the horizon
	lagging  bool     // it left idle pools below the horizon
	active   []string // every active pool, when asked for
}

// dueCall is sqlPoolsDue queued on a pgx.Batch (queueDue).
type dueCall struct {
	*txCall
	res dueResult
}

// queueDue queues on b, in a transaction of its own, sqlPoolsDue; with
// all, the result lists every active pool. limits are the transaction's
// own settings (a ride's, sqlRideLimits), or "". It moves idle pools'
// cursors, so it checks the schema as a batch does (code).
func queueDue(b *pgx.Batch, code int, all bool, limits string) *dueCall {
	c := &dueCall{}
	c.txCall = queueTx(b, code, limits, func(row pgx.Row) error {
		return row.Scan(&c.res.horizon, &c.res.due, &c.res.advanced, &c.res.lagging, &c.res.active)
	}, sqlPoolsDue, dueWindow, idleCursorInterval.String(), idleCursorLag, all)
	return c
}

// poolsDue runs sqlPoolsDue (queueDue) in one round trip.
func (f *Fanout) poolsDue(ctx context.Context, all bool) (dueResult, error) {
	b := &pgx.Batch{}
	c := queueDue(b, f.gate.Code(), all, "")
	if err := f.db.SendBatch(ctx, b).Close(); err != nil {
		return dueResult{}, fmt.Errorf("list the pools due: %w", err)
	}
	if !c.ran || !c.committed {
		return dueResult{}, fmt.Errorf("list the pools due: the transaction did not commit")
	}
	f.dueDone(c.res)
	return c.res, nil
}

// dueDone notes the pools sqlPoolsDue moved to the horizon: a plain one
// may ride on the next round (ride.go).
func (f *Fanout) dueDone(r dueResult) {
	if r.horizon == nil || len(r.advanced) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range r.advanced {
		if k := f.plain[n]; k == plainAll || k == plainTyped {
			f.heads[n] = *r.horizon
		}
	}
}
