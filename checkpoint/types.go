package checkpoint

import "github.com/riverbus/riverbus/bustype"

// The types riverbus.Client's CheckpointX methods take and return, under the
// names they had in this package before the vocabulary moved to bustype.
// Each is the bustype type itself, not a copy: a value of one is a value of
// the other.
type (
	// Status is where a pool stands: horizon, cursor, checkpoint and lag
	// (bustype.Checkpoint).
	Status = bustype.Checkpoint

	// Holder is what holds a pool's checkpoint (bustype.CheckpointHolder).
	Holder = bustype.CheckpointHolder

	// Job is a job of a pool as a Holder reports it, a River job or a dead
	// letter (bustype.PoolJob).
	Job = bustype.PoolJob

	// WaitOpts are the optional settings of Client.CheckpointWait
	// (bustype.CheckpointWaitOpts).
	WaitOpts = bustype.CheckpointWaitOpts
)

// WaitPollIntervalDefault is the default of WaitOpts.PollInterval.
const WaitPollIntervalDefault = bustype.CheckpointWaitPollIntervalDefault
