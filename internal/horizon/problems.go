package horizon

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
)

// Problem is a broken assumption of the gap proof.
type Problem = bustype.HorizonProblem

// Problem codes (bustype's), for this package's own use.
const (
	ProblemSequenceCache         = bustype.ProblemSequenceCache
	ProblemSequenceIncrement     = bustype.ProblemSequenceIncrement
	ProblemSequenceCycle         = bustype.ProblemSequenceCycle
	ProblemSequenceBelowHorizon  = bustype.ProblemSequenceBelowHorizon
	ProblemAssignTriggerMissing  = bustype.ProblemAssignTriggerMissing
	ProblemAssignTriggerDisabled = bustype.ProblemAssignTriggerDisabled
	ProblemAssignTriggerChanged  = bustype.ProblemAssignTriggerChanged
	ProblemNotifyTriggerMissing  = bustype.ProblemNotifyTriggerMissing
	ProblemEventAboveSequence    = bustype.ProblemEventAboveSequence
)

// ProblemCodes lists every problem code, for metrics that report each.
var ProblemCodes = bustype.ProblemCodes

var problemTexts = map[string]struct {
	message, fix string
	blocks       bool
}{
	ProblemSequenceCache: {"riverbus_event_global_sequence caches numbers per session, so a missing number says nothing about when it was handed out; the horizon proves and skips no gap.",
		"ALTER SEQUENCE riverbus_event_global_sequence CACHE 1; then end the sessions that appended since the change (they may hold cached numbers)", true},
	ProblemSequenceIncrement: {"riverbus_event_global_sequence does not count by 1; the horizon proves and skips no gap.",
		"ALTER SEQUENCE riverbus_event_global_sequence INCREMENT BY 1", true},
	ProblemSequenceCycle: {"riverbus_event_global_sequence may cycle back below the horizon; the horizon proves and skips no gap.",
		"ALTER SEQUENCE riverbus_event_global_sequence NO CYCLE", true},
	ProblemSequenceBelowHorizon: {"riverbus_event_global_sequence hands out numbers at or below the horizon (setval backwards, or a damaged horizon): no pool reads events numbered there; the horizon does not move.",
		"SELECT setval('riverbus_event_global_sequence', greatest((SELECT max(global_sequence) FROM riverbus_event), (SELECT horizon FROM riverbus_horizon))); " +
			"events appended meanwhile are at or below the horizon: redeliver them with riverbus pool reset (docs/operations.md, \"What riverbus requires of the sequence\"). " +
			"Never set it to an event the sequence never handed out (far above the rest, say near 2^63): that exhausts the sequence (docs/operations.md, same section)", true},
	ProblemAssignTriggerMissing: {"riverbus_event has no trigger riverbus_event_assign: inserters choose the sequence and transaction id; the horizon proves and skips no gap.",
		"run riverbus migrate on a database where the trigger exists, or recreate it as migration 001 does", true},
	ProblemAssignTriggerDisabled: {"the trigger riverbus_event_assign is disabled: inserters choose the sequence and transaction id; the horizon proves and skips no gap.",
		"ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_assign", true},
	ProblemAssignTriggerChanged: {"the trigger riverbus_event_assign or its function is not the one riverbus created: the order xid-then-sequence is not guaranteed; the horizon proves and skips no gap.",
		"restore riverbus_event_assign() and its trigger as migration 001 creates them", true},
	ProblemEventAboveSequence: {"events are numbered above riverbus_event_global_sequence's last value: they did not get their numbers from the assign trigger (a row inserted with the trigger disabled or in replica mode; before migration 017, a temporary sequence of the same name); the horizon stops below them, reports them and delivers them to no pool, and the sequence would hand out their numbers again.",
		"riverbus repair sequence, as the schema owner (SELECT * FROM riverbus_event_renumber()): gives each one the sequence's next number, and the pools receive it once", false},
	ProblemNotifyTriggerMissing: {"riverbus_event has no enabled trigger riverbus_event_notify: new events wait for the poll interval (no effect on correctness).",
		"ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_notify, or recreate it as migration 001 does", false},
}

// ProblemBlocks reports whether the problem with code stops the horizon
// from proving and skipping gaps (every one but a missing notify trigger
// and events above the sequence, which hold only themselves, and any code
// this version does not know).
func ProblemBlocks(code string) bool {
	t, ok := problemTexts[code]
	return !ok || t.blocks
}

// ProblemsOf describes the problems whose codes and details a read of
// SQLAssumptions returned, in that order.
func ProblemsOf(codes, details []string) []Problem {
	if len(codes) == 0 {
		return nil
	}
	out := make([]Problem, len(codes))
	for i, c := range codes {
		t, ok := problemTexts[c]
		if !ok {
			t.message, t.blocks = "unknown problem", true
		}
		out[i] = Problem{Code: c, Detail: details[i], Message: t.message, Fix: t.fix, Blocks: t.blocks}
	}
	return out
}

// CheckAssumptions reports what breaks the assumptions of the gap proof:
// the sequence's cache, increment and cycle settings, its next number
// against the horizon, and the assign and notify triggers of
// riverbus_event. Empty when every one holds. Each horizon round runs the
// same check; this is for status pages and monitoring.
func CheckAssumptions(ctx context.Context, db database.DB) ([]Problem, error) {
	rows, err := db.Query(ctx, sqlAssumptionsList)
	if err != nil {
		return nil, fmt.Errorf("check assumptions: %w", err)
	}
	var codes, details []string
	var code, detail string
	_, err = pgx.ForEachRow(rows, []any{&code, &detail}, func() error {
		codes, details = append(codes, code), append(details, detail)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check assumptions: %w", err)
	}
	return ProblemsOf(codes, details), nil
}
