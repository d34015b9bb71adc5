package engine

import (
	"encoding/json"

	"github.com/riverbus/riverbus/bustype"
)

// The general path's job args. Each shape is a bustype type (EventJob,
// GroupJob, and their dead-letter stubs), the one the plain path's SQL
// builds too (plain_test.go pins the two together) and that handlers
// decode.

// envelope is a unit's job args: an eventJob or a groupPart.
type envelope interface {
	// encode returns the args' JSON, or why they cannot be encoded.
	encode() ([]byte, error)
	// stub returns the args of the unit's dead letter, when the unit
	// cannot become a job: the envelope without its payload, and reason.
	stub(reason string) any
}

// eventJob is the args of a pool job of one event.
type eventJob bustype.EventJob

func (j eventJob) encode() ([]byte, error) { return json.Marshal(bustype.EventJob(j)) }

func (j eventJob) stub(reason string) any {
	return bustype.EventJobStub{GlobalSequence: j.GlobalSequence, EventID: j.EventID, Type: j.Type, Key: j.Key,
		Tags: j.Tags, OccurredAt: j.OccurredAt, Late: j.Late, Undeliverable: reason}
}
