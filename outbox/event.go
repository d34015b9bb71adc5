package outbox

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Event is one row of riverbus_event, as applications append it and as every
// pool job carries it. Its JSON names are a contract: the fan-out writes them
// (in Go and in SQL) and handlers read them.
//
// On append, GlobalSequence is ignored (the database assigns it), EventID
// may be left zero (a UUIDv7 is generated), Data must be valid JSON,
// Metadata must be a JSON object or empty (stored as {}), and OccurredAt may
// be left zero (the database's now(), the start time of the appending
// transaction, is used); it is stored with microsecond precision. Version
// may be left zero, which appends version 1.
type Event struct {
	GlobalSequence int64           `json:"global_sequence"`
	EventID        uuid.UUID       `json:"event_id"`
	Type           string          `json:"type"`
	Key            string          `json:"key"`
	Tags           []string        `json:"tags"`
	Data           json.RawMessage `json:"data"`
	Metadata       json.RawMessage `json:"metadata"`
	OccurredAt     time.Time       `json:"occurred_at"`

	// Version is the version of the event type's data: 1 for a type's first
	// shape, higher after each change a consumer must be told about
	// (1 to VersionMax). Appenders write the version they produce;
	// workers upcast older versions to the one their handlers know
	// (workers.Registry's Upcast, docs/evolving-events.md), so a handler's
	// job says the version of the data it holds. Zero on append means 1.
	// An envelope written before events had versions (a job inserted by
	// an older build) has none: it decodes as 0 here, and a worker hands
	// it to its handler as version 1, which every such event is.
	Version int `json:"version"`
}

// VersionMax is the highest version of an event type's data; the
// database's CHECK riverbus_event_version_valid holds the same bound.
const VersionMax = 10000
