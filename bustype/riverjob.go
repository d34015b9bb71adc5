package bustype

import "time"

// JobState is the state of a River job, as River names it (the values of
// rivertype.JobState; convert with rivertype.JobState(s) and back).
type JobState string

// River's job states.
const (
	JobStateAvailable JobState = "available"
	JobStateCancelled JobState = "cancelled"
	JobStateCompleted JobState = "completed"
	JobStateDiscarded JobState = "discarded"
	JobStatePending   JobState = "pending"
	JobStateRetryable JobState = "retryable"
	JobStateRunning   JobState = "running"
	JobStateScheduled JobState = "scheduled"
)

// AttemptError is one failed attempt of a job, as River records it in the
// job's errors (the JSON of rivertype.AttemptError).
type AttemptError struct {
	// At is when the error occurred.
	At time.Time `json:"at"`
	// Attempt is the attempt number, from 1.
	Attempt int `json:"attempt"`
	// Error is the error's text (a panic's value for a panic). It is the
	// handler's text: escape it before printing it to a terminal.
	Error string `json:"error"`
	// Trace is the stack trace of a panic, empty otherwise.
	Trace string `json:"trace"`
}

// JobStates returns every job state, in River's order.
func JobStates() []JobState {
	return []JobState{JobStateAvailable, JobStateCancelled, JobStateCompleted, JobStateDiscarded,
		JobStatePending, JobStateRetryable, JobStateRunning, JobStateScheduled}
}
