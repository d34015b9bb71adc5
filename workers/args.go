package workers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"

	"github.com/google/uuid"

	"github.com/riverbus/riverbus/outbox"
)

// Args is the args of a pool job of one event: the event's envelope
// (global_sequence, event_id, type, key, tags, data, metadata, occurred_at,
// at the top level) and "late": true for a late event. Embed it in a
// handler's args type, next to a Kind method that returns the pool name:
//
//	type BillingArgs struct{ workers.Args }
//
//	func (BillingArgs) Kind() string { return "billing" }
//
// The fan-out builds it in Go and, for plain pools, in SQL (a test pins the
// SQL to this type, key for key); its JSON names are a contract, like
// Event's.
type Args struct {
	outbox.Event

	// Late is true when the event committed after the horizon had skipped
	// its sequence on the gap timeout: it is delivered after events with
	// higher sequences. Handlers that depend on order may want to know.
	// Omitted from the JSON when false.
	Late bool `json:"late,omitempty"`
}

// GroupArgs is the args of a job of a transaction-grouped pool (a pool
// created with --group transaction): the events that one application
// transaction appended after the pool's start point (where it was created
// from, or last reset to) and that match the pool's filter — with one key,
// when the pool is key-ordered — in sequence order. Embed it like Args:
//
//	type LedgerArgs struct{ workers.GroupArgs }
//
//	func (LedgerArgs) Kind() string { return "ledger" }
//
// A group of more than 10,000 events, or of more than 16 MB of encoded
// events, comes as several jobs, its parts: each holds consecutive events
// of the group, carries the global sequence of its own first event, and is
// numbered Part (1 to Parts; Last reports the last one). In an ordered pool
// the parts run one after another, in order; in an unordered one they may
// run in parallel, like any two jobs.
type GroupArgs struct {
	// GlobalSequence is the sequence of the job's first event.
	GlobalSequence int64 `json:"global_sequence"`
	// TransactionID is the appending transaction's id (xid8, as text).
	TransactionID string `json:"transaction_id"`
	// Key is the key of the group's first event, in every part (every
	// event's key, in a key-ordered pool).
	Key    string         `json:"key"`
	Events []outbox.Event `json:"events"`
	// Late is true when the transaction committed after the horizon had
	// skipped one of its sequences on the gap timeout. Omitted from the
	// JSON when false.
	Late bool `json:"late,omitempty"`
	// Part is this job's part of the group, from 1; Parts is how many
	// there are (1: the whole group is in this job). Both are 0 in jobs
	// inserted before groups had parts.
	Part  int `json:"part"`
	Parts int `json:"parts"`
}

// Last reports whether the job holds the last events of its group.
func (j GroupArgs) Last() bool { return j.Part == j.Parts }

// AppendJSON appends to b the encoding json.Marshal gives j, but with
// events in place of j.Events: the events already encoded by encoding/json
// and separated by commas. The fan-out writes a group's jobs this way,
// encoding each event once, as it is read.
func (j GroupArgs) AppendJSON(b, events []byte) []byte {
	b = append(b, `{"global_sequence":`...)
	b = strconv.AppendInt(b, j.GlobalSequence, 10)
	b = append(b, `,"transaction_id":`...)
	b = appendJSONString(b, j.TransactionID)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, j.Key)
	b = append(b, `,"events":[`...)
	b = append(b, events...)
	b = append(b, ']')
	if j.Late {
		b = append(b, `,"late":true`...)
	}
	b = append(b, `,"part":`...)
	b = strconv.AppendInt(b, int64(j.Part), 10)
	b = append(b, `,"parts":`...)
	b = strconv.AppendInt(b, int64(j.Parts), 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json encodes it: printable ASCII
// but the characters it escapes as is, anything else through it.
func appendJSONString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// DecodeError is returned by Decode and DecodeStrict when an event's data
// does not fit the target type. It is a plain error on purpose: a worker that
// returns it has its job retried and, after the last attempt, discarded, so
// the event ends as a dead letter rather than being skipped.
type DecodeError struct {
	// GlobalSequence, EventID and EventType identify the event.
	GlobalSequence int64
	EventID        uuid.UUID
	EventType      string
	// Target is the Go type the data was decoded into.
	Target string
	// Err is the underlying error from encoding/json, or a description of
	// what was wrong.
	Err error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode data of event %d (%s) into %s: %v", e.GlobalSequence, e.EventType, e.Target, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Decode decodes the event's data into a T.
//
// It rejects data that is empty, is not valid JSON, has anything after the
// JSON value, or has a value of the wrong type for a field. It ignores fields
// that T does not have, so that producers can add fields to an event type
// without turning every event of that type into a dead letter for consumers
// not yet updated; use DecodeStrict to reject them. JSON null gives T's zero
// value, as encoding/json does.
//
// Every failure is a *DecodeError.
func Decode[T any](event outbox.Event) (T, error) {
	return decode[T](event, false)
}

// DecodeStrict is Decode that also rejects fields T does not have.
func DecodeStrict[T any](event outbox.Event) (T, error) {
	return decode[T](event, true)
}

func decode[T any](event outbox.Event, strict bool) (T, error) {
	var v T
	fail := func(err error) (T, error) {
		var zero T
		return zero, &DecodeError{
			GlobalSequence: event.GlobalSequence,
			EventID:        event.EventID,
			EventType:      event.Type,
			Target:         reflect.TypeFor[T]().String(),
			Err:            err,
		}
	}
	if len(bytes.TrimSpace(event.Data)) == 0 {
		return fail(errors.New("event has no data"))
	}
	dec := json.NewDecoder(bytes.NewReader(event.Data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&v); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(errors.New("unexpected data after the JSON value"))
	}
	return v, nil
}
