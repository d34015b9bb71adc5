package engine

import (
	"bytes"
	"encoding/json"
	"errors"

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

// groupJobFrame returns the JSON of a part of a group around its events:
// j's own encoding (encoding/json's, with j.Events nil) cut where the
// events go. head ends with the events' opening bracket, tail starts with
// the closing one; the part's JSON is head, its encoded events separated by
// commas, then tail. So a group's events are encoded once, one by one, as
// they are read, and what surrounds them is GroupJob's encoding.
func groupJobFrame(j bustype.GroupJob) (head, tail []byte, err error) {
	j.Events = nil
	enc, err := json.Marshal(j)
	if err != nil {
		return nil, nil, err
	}
	// Inside an encoded string every quote is escaped, so this matches
	// the events field only.
	const events = `"events":null`
	i := bytes.Index(enc, []byte(events))
	if i < 0 {
		return nil, nil, errors.New("GroupJob's encoding has no events field")
	}
	head = append(enc[:i:i], `"events":[`...)
	tail = append([]byte{']'}, enc[i+len(events):]...)
	return head, tail, nil
}
