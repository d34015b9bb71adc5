package bustype

import "fmt"

// Problem codes: what breaks the gap proof's assumptions (docs/design.md §2.4).
const (
	ProblemSequenceCache         = "sequence_cache"
	ProblemSequenceIncrement     = "sequence_increment"
	ProblemSequenceCycle         = "sequence_cycle"
	ProblemSequenceBelowHorizon  = "sequence_below_horizon"
	ProblemAssignTriggerMissing  = "assign_trigger_missing"
	ProblemAssignTriggerDisabled = "assign_trigger_disabled"
	ProblemAssignTriggerChanged  = "assign_trigger_changed"
	ProblemNotifyTriggerMissing  = "notify_trigger_missing"
	ProblemEventAboveSequence    = "event_above_sequence"
)

// ProblemCodes lists every problem code, for metrics that report each.
var ProblemCodes = []string{
	ProblemAssignTriggerChanged, ProblemAssignTriggerDisabled, ProblemAssignTriggerMissing,
	ProblemEventAboveSequence, ProblemNotifyTriggerMissing, ProblemSequenceBelowHorizon, ProblemSequenceCache,
	ProblemSequenceCycle, ProblemSequenceIncrement,
}

// HorizonProblem is a broken assumption of the gap proof: while one that
// Blocks holds, the horizon proves and skips no gap (docs/design.md §2.4).
type HorizonProblem struct {
	// Code is one of the Problem* constants.
	Code string `json:"code"`
	// Message says what is wrong and what riverbus does about it.
	Message string `json:"message"`
	// Detail is what the database showed (the cache size, say).
	Detail string `json:"detail"`
	// Fix is what an operator runs to repair it.
	Fix string `json:"fix"`
	// Blocks: while it holds, the horizon proves and skips nothing (it
	// only passes contiguous committed events, and not even those when the
	// sequence is below the horizon).
	Blocks bool `json:"blocks"`
}

func (p HorizonProblem) String() string {
	return fmt.Sprintf("%s (%s): %s Fix: %s", p.Code, p.Detail, p.Message, p.Fix)
}
