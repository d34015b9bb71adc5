package outbox

import "github.com/riverbus/riverbus/bustype"

// Event is the event an application appends: one row of riverbus_event (see
// bustype.Event for its fields and what append does with each). River job
// args of every pool carry it, so its JSON names are a contract.
type Event = bustype.Event
