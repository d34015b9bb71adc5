package bustype

import (
	"time"

	"github.com/google/uuid"
)

// The shapes of a pool job's args other than a handler's (workers.Args,
// workers.GroupArgs): the reference to a big event's payload and the stubs
// of dead letters. The fan-out builds them; the worker middleware, River UI
// and the dead-letter retry read them. Their JSON names are a contract,
// like Event's.

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
	// Version is the version of the event type's data (outbox.Event's
	// Version); 0 in args written before events had versions, which
	// means 1.
	Version int `json:"version"`
}

// EventJobRef is the args of the job of an event whose data and metadata
// are too big to copy into a job (more than 64 KiB as jsonb): the envelope
// without them, Late, and PayloadInLog, always true. A group job's events
// may be references too (without Late). Handlers never see one: the worker
// middleware of every River client riverbus configures reads the payload
// from riverbus_event before River decodes the args, so a handler gets the
// workers.Args or workers.GroupArgs with every event whole. River UI and `dlq show`
// show the reference as the job row holds it. docs/design.md §3 says why.
type EventJobRef struct {
	EventHead
	Late         bool `json:"late,omitempty"`
	PayloadInLog bool `json:"payload_in_log"`
}

// EventJobStub is the args of the dead letter of an event's job (workers.Args) that could not
// become a job (an event nested deeper than encoding/json accepts, or an
// envelope too big for jsonb): the envelope without the event's data and
// metadata, and the reason. Retrying the dead letter rebuilds the job
// from riverbus_event, keeping Late.
type EventJobStub struct {
	EventHead
	Late bool `json:"late,omitempty"`
	// Undeliverable is why the event could not become a job. Its key,
	// "undeliverable", marks a stub in a dead letter's args.
	Undeliverable string `json:"undeliverable"`
}

// GroupJobStub is the args of the dead letter of a group's job (workers.GroupArgs) that could not
// become a job: the job without its events, which Sequences names, and the
// reason. Retrying the dead letter rebuilds the job from
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
