package checkpoint

import (
	"encoding/json"
	"math"
	"time"

	"github.com/riverbus/riverbus/bustype"
)

// jobJSON is a Job as `riverbus status --json` shows it (checkpoint_holder
// and its lane_blocked_by): the field names scripts read, and the next
// attempt only where there is one to wait for.
type jobJSON struct {
	ID            int64            `json:"job_id"`
	Sequence      int64            `json:"global_sequence"`
	State         bustype.JobState `json:"state"`
	DeadLetter    bool             `json:"dead_letter,omitempty"`
	Attempt       int              `json:"attempt"`
	MaxAttempts   int              `json:"max_attempts"`
	NextAttemptAt *time.Time       `json:"next_attempt_at,omitempty"`
	DiscardedAt   *time.Time       `json:"discarded_at,omitempty"`
	LastError     string           `json:"last_error,omitempty"`
	Lane          *string          `json:"lane,omitempty"`
}

func (j *Job) toJSON() jobJSON {
	w := jobJSON{ID: j.ID, Sequence: j.Sequence, State: j.State, DeadLetter: j.DeadLetter, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, LastError: j.LastError, Lane: j.Lane}
	if next, ok := j.NextAttempt(); ok {
		w.NextAttemptAt = &next
	}
	if !j.DiscardedAt.IsZero() {
		d := j.DiscardedAt
		w.DiscardedAt = &d
	}
	return w
}

func (w *jobJSON) job() Job {
	j := Job{ID: w.ID, Sequence: w.Sequence, State: w.State, DeadLetter: w.DeadLetter, Attempt: w.Attempt,
		MaxAttempts: w.MaxAttempts, LastError: w.LastError, Lane: w.Lane}
	if w.NextAttemptAt != nil {
		j.ScheduledAt = *w.NextAttemptAt
	}
	if w.DiscardedAt != nil {
		j.DiscardedAt = *w.DiscardedAt
	}
	return j
}

// MarshalJSON writes the job as `riverbus status --json` shows it: job_id,
// global_sequence, state, dead_letter (when true), attempt, max_attempts,
// next_attempt_at (ScheduledAt, only when NextAttempt has one),
// discarded_at (when set), last_error (when set) and lane (in an ordered
// pool).
func (j Job) MarshalJSON() ([]byte, error) {
	return json.Marshal(j.toJSON())
}

// UnmarshalJSON reads what MarshalJSON writes. The JSON leaves out the
// ScheduledAt of a job that waits for no attempt, so it is zero then.
func (j *Job) UnmarshalJSON(b []byte) error {
	var w jobJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*j = w.job()
	return nil
}

// holderJSON is a Holder as `riverbus status --json` shows it: its job's
// fields, then how long the checkpoint has stood still, what blocks the
// lane and whether it is stuck, computed as of At (which it does not
// carry).
type holderJSON struct {
	jobJSON
	HeldSince     time.Time `json:"held_since"`
	HeldSeconds   float64   `json:"held_seconds"`
	LaneBlockedBy *Job      `json:"lane_blocked_by,omitempty"`
	Stuck         bool      `json:"stuck"`
}

// MarshalJSON writes the holder as `riverbus status --json` shows it: the
// fields of its Job (Job.MarshalJSON), then held_since, held_seconds
// (HeldFor), lane_blocked_by (LaneBlocker, when set) and stuck (Stuck).
// Holder needs its own: it would otherwise write only the Job it embeds.
func (h Holder) MarshalJSON() ([]byte, error) {
	return json.Marshal(holderJSON{jobJSON: h.toJSON(), HeldSince: h.HeldSince, HeldSeconds: h.HeldFor().Seconds(),
		LaneBlockedBy: h.LaneBlocker, Stuck: h.Stuck()})
}

// UnmarshalJSON reads what MarshalJSON writes. The JSON does not carry At:
// it becomes HeldSince plus held_seconds, so that HeldFor, Until, Stuck and
// Stalled answer as they did when the holder was written. stuck is not
// read: Stuck computes it again.
func (h *Holder) UnmarshalJSON(b []byte) error {
	var w holderJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*h = Holder{Job: w.job(), HeldSince: w.HeldSince, LaneBlocker: w.LaneBlockedBy,
		At: w.HeldSince.Add(time.Duration(math.Round(w.HeldSeconds * float64(time.Second))))}
	return nil
}
