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
// transaction, is used); it is stored with microsecond precision.
type Event struct {
	GlobalSequence int64           `json:"global_sequence"`
	EventID        uuid.UUID       `json:"event_id"`
	Type           string          `json:"type"`
	Key            string          `json:"key"`
	Tags           []string        `json:"tags"`
	Data           json.RawMessage `json:"data"`
	Metadata       json.RawMessage `json:"metadata"`
	OccurredAt     time.Time       `json:"occurred_at"`
}
