package bustype

import "time"

// RetentionPolicy is the event retention policy (docs/operations.md, "Event retention"): one
// row in riverbus_retention, set by the owner with `riverbus retention set`
// (Client.RetentionSet).
type RetentionPolicy struct {
	// Enabled is false until a policy is set: nothing is ever deleted.
	Enabled bool
	// Keep is how long events are kept after they were appended, by the
	// database's clock (riverbus_event.appended_at, which the database sets
	// whatever the appender supplies; occurred_at plays no part). Zero: until every pool has passed them ("until consumed"). Whatever
	// Keep says, an event still needed by a pool, the horizon, a late event
	// or a dead letter is kept (RetentionHold).
	Keep time.Duration
	// TrimmedThrough is where the log now begins: every event at or below
	// it may have been deleted, none above it was. It only moves forward. A
	// pool created --from beginning starts after it, a reset to 0 resets to
	// it, and a start below it is refused (an ErrInvalidPool error).
	TrimmedThrough int64
	// EventsTrimmed counts the events retention deleted, ever.
	EventsTrimmed int64
	// LastTrimmedAt is when retention last deleted events; nil: never.
	LastTrimmedAt *time.Time
}

// RetentionHold is one rule that holds retention back: every event above
// Floor is kept because of it. Rule is "horizon", "pool" (Holder: the
// pool's name), "skipped" (Holder: the lowest skipped range), "late"
// (Holder: the lowest late event not yet retired), "dead letter"
// (Holder: the pool and job of the lowest dead letter of an undeliverable
// event) or "no pools" (no pool exists: the log is kept whole).
type RetentionHold struct {
	Rule   string
	Holder string
	Floor  int64
}

// RetentionStop says why one step of retention stopped where it did.
type RetentionStop string

// Why a step of retention stopped.
const (
	// RetentionStopFloor: it reached the floor (RetentionPlan.HeldBy).
	RetentionStopFloor RetentionStop = "floor"
	// RetentionStopKeep: the next event is younger than the keep period.
	RetentionStopKeep RetentionStop = "keep"
	// RetentionStopTransaction: the next event's transaction has an event
	// above the floor; a transaction is deleted whole or not at all.
	RetentionStopTransaction RetentionStop = "transaction"
	// RetentionStopBatch: the step reached its batch size; there is more.
	RetentionStopBatch RetentionStop = "batch"
	// RetentionStopDisabled: no policy is set (and no Keep was previewed).
	RetentionStopDisabled RetentionStop = "disabled"
)

// RetentionPlan is what retention removes (a dry run) or removed: the
// events in (From, Through], their count and when the oldest and the newest
// of them were appended, the time the keep period runs on (nil when there
// are none).
type RetentionPlan struct {
	Policy  RetentionPolicy
	From    int64
	Through int64
	Events  int64
	Oldest  *time.Time
	Newest  *time.Time
	// Floor is the highest sequence any rule lets go (the least of Holds);
	// Through stays at or below it.
	Floor int64
	// StoppedBy says why Through is where it is.
	StoppedBy RetentionStop
	// Holds lists the rules that hold retention back, lowest floor first;
	// the first one holds the floor.
	Holds []RetentionHold
	// Batches is how many steps it took.
	Batches int
	// Applied is true when the events were deleted, false for a dry run.
	Applied bool
}

// HeldBy returns the rule that holds the floor, or nil when none does.
func (p *RetentionPlan) HeldBy() *RetentionHold {
	if len(p.Holds) == 0 {
		return nil
	}
	return &p.Holds[0]
}
