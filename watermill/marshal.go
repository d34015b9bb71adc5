package watermill

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// PayloadEncoding says how a message's payload is stored as the event's
// data, which the log keeps as jsonb.
type PayloadEncoding string

// Payload encodings.
const (
	// PayloadExact keeps the payload's bytes exactly: a payload that is
	// UTF-8 text without NUL becomes a JSON string (readable in River UI
	// and psql), any other a JSON object {"base64": "..."}. The default.
	PayloadExact PayloadEncoding = "exact"
	// PayloadJSON stores a JSON payload as the event's data itself, so
	// riverbus's own handlers, webhooks and `riverbus tail` see the
	// document. jsonb normalises what it stores (white space, key order,
	// duplicate keys, number spelling), so the payload a subscriber gets
	// back equals the published one as JSON, not byte for byte. A payload
	// that is not valid JSON is refused.
	PayloadJSON PayloadEncoding = "json"
)

// The event metadata riverbus's Publisher writes. Watermill's own metadata
// is kept whole under MetadataKey, so that it comes back exactly as
// published whatever riverbus adds at the top level (the trace context,
// under outbox.TraceParentKey).
const (
	// MetadataKey is the event metadata member that holds the message:
	// {"uuid": ..., "metadata": {...}, "payload": "text"|"base64"|"json"}.
	MetadataKey = "watermill"
)

type envelope struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  string            `json:"payload"` // text, base64 or json
}

const (
	payloadText   = "text"
	payloadBase64 = "base64"
	payloadJSON   = "json"
)

// MessageError is a message the Publisher refuses, before anything is
// written: Publish appends all of its messages or none.
type MessageError struct {
	Topic string
	UUID  string
	Index int // in Publish's messages
	Err   error
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("riverbus watermill: message %d (uuid %q) of topic %q: %v", e.Index, e.UUID, e.Topic, e.Err)
}

func (e *MessageError) Unwrap() error { return e.Err }

// storable reports why s cannot be stored as a JSON string in jsonb
// exactly: PostgreSQL refuses \u0000 in jsonb, and JSON has no way to
// write bytes that are not UTF-8 (Go would replace them).
func storable(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("is not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("holds a NUL character, which PostgreSQL's jsonb cannot store")
	}
	return nil
}

// toEvent turns msg into the event Publish appends: data from the
// payload, the message under MetadataKey, and trace (the trace context
// members) at the top level of the event's metadata.
func toEvent(topic string, msg *message.Message, enc PayloadEncoding, key string, tags []string, trace map[string]string) (outbox.Event, error) {
	env := envelope{UUID: msg.UUID}
	if err := storable(msg.UUID); err != nil {
		return outbox.Event{}, fmt.Errorf("uuid %w", err)
	}
	if len(msg.Metadata) > 0 {
		env.Metadata = make(map[string]string, len(msg.Metadata))
		for k, v := range msg.Metadata {
			if err := storable(k); err != nil {
				return outbox.Event{}, fmt.Errorf("metadata key %q %w", k, err)
			}
			if err := storable(v); err != nil {
				return outbox.Event{}, fmt.Errorf("metadata %q: value %w", k, err)
			}
			env.Metadata[k] = v
		}
	}
	var data []byte
	var err error
	switch enc {
	case PayloadJSON:
		if !json.Valid(msg.Payload) {
			return outbox.Event{}, fmt.Errorf("payload is not valid JSON (the publisher's Payload is PayloadJSON)")
		}
		env.Payload = payloadJSON
		data = msg.Payload
	default:
		if storable(string(msg.Payload)) == nil {
			env.Payload = payloadText
			data, err = json.Marshal(string(msg.Payload))
		} else {
			env.Payload = payloadBase64
			data, err = json.Marshal(map[string]string{"base64": base64.StdEncoding.EncodeToString(msg.Payload)})
		}
		if err != nil {
			return outbox.Event{}, err
		}
	}
	md := make(map[string]any, 1+len(trace))
	for k, v := range trace {
		md[k] = v
	}
	md[MetadataKey] = env
	metadata, err := json.Marshal(md)
	if err != nil {
		return outbox.Event{}, err
	}
	return outbox.Event{Type: topic, Key: key, Tags: tags, Data: data, Metadata: metadata}, nil
}

// toMessage turns a pool job's event back into the message that was
// published. An event that no Watermill publisher wrote (outbox.Append,
// SQL, a backfill) becomes a message too: its event id as the UUID, its
// data as the payload, and the string members of its metadata as the
// message's metadata.
func toMessage(ev *outbox.Event) (*message.Message, error) {
	var md map[string]json.RawMessage
	if len(ev.Metadata) > 0 {
		if err := json.Unmarshal(ev.Metadata, &md); err != nil {
			return nil, fmt.Errorf("event %d: metadata: %w", ev.GlobalSequence, err)
		}
	}
	raw, ok := md[MetadataKey]
	if !ok {
		msg := message.NewMessage(eventUUID(ev.EventID), message.Payload(ev.Data))
		for k, v := range md {
			var s string
			if json.Unmarshal(v, &s) == nil {
				msg.Metadata.Set(k, s)
			}
		}
		return msg, nil
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("event %d: metadata member %q is not a Watermill message: %w", ev.GlobalSequence, MetadataKey, err)
	}
	var payload []byte
	switch env.Payload {
	case payloadText:
		var s string
		if err := json.Unmarshal(ev.Data, &s); err != nil {
			return nil, fmt.Errorf("event %d: text payload: data is not a JSON string: %w", ev.GlobalSequence, err)
		}
		payload = []byte(s)
	case payloadBase64:
		var b struct {
			Base64 string `json:"base64"`
		}
		if err := json.Unmarshal(ev.Data, &b); err != nil {
			return nil, fmt.Errorf("event %d: base64 payload: %w", ev.GlobalSequence, err)
		}
		var err error
		if payload, err = base64.StdEncoding.DecodeString(b.Base64); err != nil {
			return nil, fmt.Errorf("event %d: base64 payload: %w", ev.GlobalSequence, err)
		}
	case payloadJSON:
		payload = append([]byte(nil), ev.Data...)
	default:
		return nil, fmt.Errorf("event %d: unknown payload encoding %q (written by a newer publisher?)", ev.GlobalSequence, env.Payload)
	}
	msg := message.NewMessage(env.UUID, payload)
	for k, v := range env.Metadata {
		msg.Metadata.Set(k, v)
	}
	return msg, nil
}

func eventUUID(id uuid.UUID) string { return id.String() }

// Event returns the riverbus event a subscriber's message was made from
// (its global sequence, type, key, tags, ... and Late), and false for a
// message that did not come from a riverbus Subscriber.
func Event(msg *message.Message) (workers.Args, bool) {
	ev, ok := msg.Context().Value(eventKey{}).(*workers.Args)
	if !ok {
		return workers.Args{}, false
	}
	return *ev, true
}

type eventKey struct{}
