package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverbus/riverbus/bustype"
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

// groupPart is the job of one part of a transaction group: its args, encoded
// once while the group is read, so a big transaction is held in memory as
// JSON only. workers.GroupArgs decodes it:
//
//	{"global_sequence": first event's, "transaction_id", "key",
//	 "late": true (if late), "events": [...], "part": 1.., "parts": n}
type groupPart struct {
	kind string
	json []byte
	// err is why the part cannot be encoded (an event Go's encoder
	// refuses); it is returned when the args are encoded.
	err error

	// What the JSON says, but the events: for whatever must describe the
	// part without its payload (a dead letter of it, say).
	txid, key   string
	late        bool
	part, parts int
	sequences   []int64 // its events', in order
}

func (a groupPart) Kind() string { return a.kind }

func (a groupPart) MarshalJSON() ([]byte, error) { return a.json, a.err }

// header is the part's envelope without its events.
func (a groupPart) header() map[string]any {
	h := map[string]any{"global_sequence": a.sequences[0], "transaction_id": a.txid, "key": a.key,
		"part": a.part, "parts": a.parts}
	if a.late {
		h["late"] = true
	}
	return h
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
			b = &groupBuilder{kind: p.name, txid: ids[ord-1].txid, key: e.Key, lane: p.lane(e.Key), late: late}
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
	kind, txid, key, lane string
	late                  bool

	parts []*groupPart
	cur   *bytes.Buffer // the JSON of the part being filled, up to its events
}

func (b *groupBuilder) add(e *event) {
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
	b.cur = &bytes.Buffer{}
	b.cur.WriteString(`{"global_sequence":`)
	b.cur.WriteString(strconv.FormatInt(seq, 10))
	b.cur.WriteString(`,"transaction_id":`)
	writeJSONString(b.cur, b.txid)
	b.cur.WriteString(`,"key":`)
	writeJSONString(b.cur, b.key)
	if b.late {
		b.cur.WriteString(`,"late":true`)
	}
	b.cur.WriteString(`,"events":[`)
	b.parts = append(b.parts, &groupPart{kind: b.kind, txid: b.txid, key: b.key, late: b.late, sequences: []int64{seq}})
}

// close ends the events of the part being filled.
func (b *groupBuilder) close() {
	if b.cur == nil {
		return
	}
	b.cur.WriteByte(']')
	b.parts[len(b.parts)-1].json = b.cur.Bytes()
	b.cur = nil
}

// finish numbers the parts and returns their units, in order.
func (b *groupBuilder) finish() []unit {
	b.close()
	n := strconv.Itoa(len(b.parts))
	units := make([]unit, len(b.parts))
	for i, a := range b.parts {
		a.part, a.parts = i+1, len(b.parts)
		if a.err == nil {
			a.json = append(a.json, `,"part":`+strconv.Itoa(a.part)+`,"parts":`+n+`}`...)
		} else {
			a.json = nil
		}
		units[i] = unit{args: *a, first: a.sequences[0], lane: b.lane, late: b.late}
	}
	return units
}

func writeJSONString(buf *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always encodes
	buf.Write(enc)
}
