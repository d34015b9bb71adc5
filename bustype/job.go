package bustype

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// The job envelopes: what the args of a pool job hold, one type per shape.
// The fan-out builds them in Go and, for plain pools, in SQL (a test pins
// the SQL to these types, key for key); handlers, webhooks and the
// dead-letter retry read them. Their JSON names are a contract, like
// Event's.

// EventJob is the args of a pool job of one event: the event's envelope
// (Event's fields, at the top level) and Late. Handlers embed it through
// workers.Args.
type EventJob struct {
	Event

	// Late is true when the event committed after the horizon had skipped
	// its sequence on the gap timeout: it is delivered after events with
	// higher sequences. Omitted from the JSON when false.
	Late bool `json:"late,omitempty"`
}

// GroupJob is the args of a job of a transaction-grouped pool: the events
// one application transaction appended after the pool's start point that
// match the pool's filter (with one key, when the pool is key-ordered), in
// sequence order, or one part of them. Handlers embed it through
// workers.GroupArgs.
type GroupJob struct {
	// GlobalSequence is the sequence of the job's first event.
	GlobalSequence int64 `json:"global_sequence"`
	// TransactionID is the appending transaction's id (xid8, as text).
	TransactionID string `json:"transaction_id"`
	// Key is the key of the group's first event, in every part (every
	// event's key, in a key-ordered pool).
	Key    string  `json:"key"`
	Events []Event `json:"events"`
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
func (j GroupJob) Last() bool { return j.Part == j.Parts }

// AppendJSON appends to b the encoding json.Marshal gives j, but with
// events in place of j.Events: the events already encoded by encoding/json
// and separated by commas. The fan-out writes a group's jobs this way,
// encoding each event once, as it is read.
func (j GroupJob) AppendJSON(b, events []byte) []byte {
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

// EventHead is an event's envelope without its data and metadata: what
// the args of a reference (EventJobRef) and of a stub (EventJobStub) hold of
// their event.
type EventHead struct {
	GlobalSequence int64     `json:"global_sequence"`
	EventID        uuid.UUID `json:"event_id"`
	Type           string    `json:"type"`
	Key            string    `json:"key"`
	Tags           []string  `json:"tags"`
	OccurredAt     time.Time `json:"occurred_at"`
}

// EventJobRef is the args of the job of an event whose data and metadata
// are too big to copy into a job (more than 64 KiB as jsonb): the envelope
// without them, Late, and PayloadInLog, always true. A group job's events
// may be references too (without Late). Handlers never see one: the worker
// middleware of every River client riverbus configures reads the payload
// from riverbus_event before River decodes the args, so a handler gets the
// EventJob or GroupJob with every event whole. River UI and `dlq show`
// show the reference as the job row holds it. docs/design.md §3 says why.
type EventJobRef struct {
	EventHead
	Late         bool `json:"late,omitempty"`
	PayloadInLog bool `json:"payload_in_log"`
}

// EventJobStub is the args of the dead letter of an EventJob that could not
// become a job (an event nested deeper than encoding/json accepts, or an
// envelope too big for jsonb): the envelope without the event's data and
// metadata, and the reason. Retrying the dead letter rebuilds the EventJob
// from riverbus_event, keeping Late.
type EventJobStub struct {
	EventHead
	Late bool `json:"late,omitempty"`
	// Undeliverable is why the event could not become a job. Its key,
	// "undeliverable", marks a stub in a dead letter's args.
	Undeliverable string `json:"undeliverable"`
}

// GroupJobStub is the args of the dead letter of a GroupJob that could not
// become a job: the job without its events, which Sequences names, and the
// reason. Retrying the dead letter rebuilds the GroupJob from
// riverbus_event, keeping the rest.
type GroupJobStub struct {
	GlobalSequence int64  `json:"global_sequence"`
	TransactionID  string `json:"transaction_id"`
	Key            string `json:"key"`
	Late           bool   `json:"late,omitempty"`
	Part           int    `json:"part"`
	Parts          int    `json:"parts"`
	// Sequences are the global sequences of the job's events, in order.
	Sequences []int64 `json:"sequences"`
	// Undeliverable is why the group's job could not be inserted. Its key,
	// "undeliverable", marks a stub in a dead letter's args.
	Undeliverable string `json:"undeliverable"`
}
