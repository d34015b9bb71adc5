package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/tracing"
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
	// groupPartMaxBytes bounds the encoded events of one job: River stores
	// args as jsonb, which cannot exceed 256 MB, and a handler should not
	// have to hold more than this at once. A single event larger than it
	// is a part of its own.
	groupPartMaxBytes = 16 << 20
)

// groupPart is the job of one part of a transaction group: its args
// (bustype.GroupJob), its events encoded once while the group is read, so
// a big transaction is held in memory as JSON only.
type groupPart struct {
	json   []byte
	events []byte // the encoded events, until json is written
	// err is why the part cannot be encoded (an event Go's encoder
	// refuses); encode returns it.
	err error

	// job is what the JSON says but the events (Events is nil), for
	// whatever must describe the part without its payload (its dead
	// letter's stub, say); sequences are its events', in order.
	job       bustype.GroupJob
	sequences []int64
}

func (a groupPart) encode() ([]byte, error) { return a.json, a.err }

func (a groupPart) stub(reason string) any {
	return bustype.GroupJobStub{GlobalSequence: a.job.GlobalSequence, TransactionID: a.job.TransactionID, Key: a.job.Key,
		Late: a.job.Late, Part: a.job.Part, Parts: a.job.Parts, Sequences: a.sequences, Undeliverable: reason}
}

// groupID is a group: a transaction, and a key in a key-ordered pool.
type groupID struct{ txid, key string }

// groupUnits turns matching events into transaction-group jobs. events are
// in sequence order. On the normal path (late false) they are the batch's
// events above cursor; on the late path, the late events the batch found
// above the pool's start point (FanOutPool leaves out the others, for every
// kind of pool): the rest of a late event's group counts from its first
// event above the start point.
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
	out, err := readGroups(br, p, ids, late)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read transaction groups: %w", err)
	}
	return out, nil
}

// readGroups reads the group statement's results and cuts each group into
// parts as its rows arrive.
func readGroups(br pgx.BatchResults, p *lockedPool, ids []groupID, late bool) ([]unit, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		out  []unit
		b    *groupBuilder
		prev int64 = -1
	)
	for rows.Next() {
		var ord int64
		var e event
		var data, metadata []byte
		var id uuid.UUID
		if err := rows.Scan(&ord, &e.GlobalSequence, &id, &e.Type, &e.Key, &e.Tags, &data, &metadata, &e.OccurredAt, &e.txid); err != nil {
			return nil, err
		}
		e.EventID = id
		e.Data = json.RawMessage(data)
		e.Metadata = json.RawMessage(metadata)
		if ord != prev {
			if b != nil {
				out = append(out, b.finish()...)
			}
			prev = ord
			b = &groupBuilder{txid: ids[ord-1].txid, key: e.Key, lane: p.lane(e.Key), late: late}
		}
		b.add(&e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if b != nil {
		out = append(out, b.finish()...)
	}
	_, err = br.Exec()
	return out, err
}

// groupBuilder cuts one group into parts as its events are read.
type groupBuilder struct {
	txid, key, lane string
	late            bool
	// trace is the trace context of the group's first traced event.
	trace tracing.Context

	parts []*groupPart
	cur   *bytes.Buffer // the encoded events of the part being filled
}

func (b *groupBuilder) add(e *event) {
	if b.trace.TraceParent == "" {
		b.trace = tracing.FromMetadata(e.Metadata)
	}
	enc, err := json.Marshal(e.Event)
	if err != nil {
		// An event Go cannot encode is a part of its own, so it alone
		// fails (and becomes the dead letter), never its neighbours.
		b.close()
		b.start(e.GlobalSequence)
		b.cur = nil
		b.parts[len(b.parts)-1].err = fmt.Errorf("encode event %d of transaction %s: %w", e.GlobalSequence, b.txid, err)
		return
	}
	if b.cur != nil {
		if n := len(b.parts[len(b.parts)-1].sequences); n >= groupPartMaxEvents || b.cur.Len()+len(enc) > groupPartMaxBytes {
			b.close()
		}
	}
	if b.cur == nil {
		b.start(e.GlobalSequence)
	} else {
		b.cur.WriteByte(',')
		last := b.parts[len(b.parts)-1]
		last.sequences = append(last.sequences, e.GlobalSequence)
	}
	b.cur.Write(enc)
}

// start opens a part whose first event is seq.
func (b *groupBuilder) start(seq int64) {
	b.parts = append(b.parts, &groupPart{job: bustype.GroupJob{GlobalSequence: seq, TransactionID: b.txid, Key: b.key, Late: b.late},
		sequences: []int64{seq}})
	b.cur = &bytes.Buffer{}
}

// close ends the events of the part being filled.
func (b *groupBuilder) close() {
	if b.cur == nil {
		return
	}
	b.parts[len(b.parts)-1].events = b.cur.Bytes()
	b.cur = nil
}

// finish numbers the parts and returns their units, in order.
func (b *groupBuilder) finish() []unit {
	b.close()
	units := make([]unit, len(b.parts))
	for i, a := range b.parts {
		a.job.Part, a.job.Parts = i+1, len(b.parts)
		if a.err == nil {
			a.json = a.job.AppendJSON(make([]byte, 0, len(a.events)+len(a.job.TransactionID)+len(a.job.Key)+96), a.events)
		}
		a.events = nil
		units[i] = unit{args: *a, first: a.sequences[0], lane: b.lane, late: b.late, trace: b.trace}
	}
	return units
}
