package fanout

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/tracing"
	"github.com/riverbus/riverbus/workers"
)

// Transaction groups.
//
// A transaction-grouped pool receives, per application transaction (and
// key, in a key-ordered pool), the matching events above the pool's start
// point (riverbus_pool_start: where it was created from or last reset to),
// in sequence order. A group is emitted by the batch that reads its
// first such event, whole, including events the horizon has not passed yet
// (they are committed with it); the batches that meet the rest of it skip
// them. "Already emitted" is an index probe: does the pool have a matching
// event of the group between the start point and the batch's first event of
// it? So a transaction is read once, however many batches it spans, and
// nothing above the start point is ever skipped, however the start point
// falls inside a transaction.
//
// A group too big for one job is cut into parts (PartMaxEvents,
// PartMaxBytes): consecutive jobs, each with the global sequence of its own
// first event (so ordered lanes keep them in order) and its part number and
// the number of parts.

// Bounds of one part of a transaction group. Variables so tests can lower
// them.
var (
	// groupPartMaxEvents is the most events one job of a group carries.
	groupPartMaxEvents = 10_000
	// groupPartMaxBytes bounds the events' data and metadata in one job,
	// as jsonb (the database measures them; they never leave it): River
	// stores args as jsonb, which cannot exceed 256 MB, and a handler
	// should not have to hold more than this at once. A single event larger than it is a
	// part of its own.
	groupPartMaxBytes = 16 << 20
)

// groupID is a group: a transaction, and a key in a key-ordered pool.
type groupID struct{ txid, key string }

// groupUnits turns matching events into transaction-group jobs. events are
// in sequence order. On the normal path (late false) they are the batch's
// events above cursor; on the late path, the late events the batch found
// above the pool's start point (fanOutPool leaves out the others, for every
// kind of pool): the rest of a late event's group counts from its first
// event above the start point. Only the events' heads are read: each
// part's args are built by the insert.
func (f *Fanout) groupUnits(ctx context.Context, tx pgx.Tx, p *lockedPool, events []event, late bool) ([]unit, error) {
	byKey := p.ordering == bustype.OrderingKey
	var (
		ids    []groupID
		firsts []int64
		seen   = map[groupID]bool{}
	)
	for _, e := range events {
		id := groupID{txid: e.txid}
		if byKey {
			id.key = e.Key
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
			firsts = append(firsts, e.GlobalSequence)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	txids := make([]string, len(ids))
	for i, id := range ids {
		txids[i] = id.txid
	}
	sql, args := sqlTransactionGroups, []any{p.name, p.tags, p.eventTypes, txids, firsts}
	if byKey {
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = id.key
		}
		sql, args = sqlTransactionKeyGroups, []any{p.name, p.tags, p.eventTypes, txids, keys, firsts}
	}
	// Without bitmap scans for this statement only (queries.go says why),
	// in one round trip.
	b := &pgx.Batch{}
	b.Queue(sqlBitmapScanOff)
	b.Queue(sql, args...)
	b.Queue(sqlBitmapScanRestore)
	br := tx.SendBatch(ctx, b)
	groups, err := readGroups(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read transaction groups: %w", err)
	}
	var seqs []int64
	for _, g := range groups {
		for _, e := range g {
			seqs = append(seqs, e.GlobalSequence)
		}
	}
	deep, sizes, err := probeEvents(ctx, tx, seqs, jsonDepthGroup, true)
	if err != nil {
		return nil, err
	}
	var out []unit
	for _, g := range groups {
		gb := &groupBuilder{txid: g[0].txid, key: g[0].Key, lane: p.lane(g[0].Key), late: late}
		for i := range g {
			g[i].size = sizes[g[i].GlobalSequence]
			gb.add(&g[i], deep[g[i].GlobalSequence])
		}
		out = append(out, gb.finish()...)
	}
	return out, nil
}

// readGroups reads the group statement's results: the groups' events, in
// order, one slice per group.
func readGroups(br pgx.BatchResults) ([][]event, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		out  [][]event
		prev int64 = -1
	)
	for rows.Next() {
		var ord int64
		var e event
		if err := rows.Scan(append([]any{&ord}, e.dest()...)...); err != nil {
			return nil, err
		}
		if ord != prev {
			out = append(out, nil)
			prev = ord
		}
		out[len(out)-1] = append(out[len(out)-1], e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	_, err = br.Exec()
	return out, err
}

// groupBuilder cuts one group into parts as its events are added.
type groupBuilder struct {
	txid, key, lane string
	late            bool
	// trace is the trace context of the group's first traced event.
	trace tracing.Context

	parts []*unit
	bytes int64 // the events' size in the part being filled
	open  bool  // the last part takes more events
}

// add adds e to the group. An event that can never be delivered
// (undeliverable, its reason) is a part of its own, so it alone fails (and
// becomes the dead letter), never its neighbours.
func (b *groupBuilder) add(e *event, undeliverable string) {
	if b.trace.TraceParent == "" {
		b.trace = e.trace
	}
	if undeliverable != "" {
		b.start(e.GlobalSequence)
		b.parts[len(b.parts)-1].undeliverable = undeliverable
		b.open = false
		return
	}
	if b.open {
		last := b.parts[len(b.parts)-1]
		if len(last.seqs) >= groupPartMaxEvents || b.bytes+e.size > int64(groupPartMaxBytes) {
			b.open = false
		}
	}
	if !b.open {
		b.start(e.GlobalSequence)
		b.open = true
	} else {
		last := b.parts[len(b.parts)-1]
		last.seqs = append(last.seqs, e.GlobalSequence)
	}
	b.bytes += e.size
}

// start opens a part whose first event is seq.
func (b *groupBuilder) start(seq int64) {
	b.parts = append(b.parts, &unit{first: seq, seqs: []int64{seq}, lane: b.lane, late: b.late,
		group: &workers.GroupArgs{GlobalSequence: seq, TransactionID: b.txid, Key: b.key, Late: b.late}})
	b.bytes = 0
}

// finish numbers the parts and returns their units, in order.
func (b *groupBuilder) finish() []unit {
	units := make([]unit, len(b.parts))
	for i, u := range b.parts {
		u.group.Part, u.group.Parts = i+1, len(b.parts)
		u.trace = b.trace
		units[i] = *u
	}
	return units
}
