package bustype

import "errors"

var (
	// ErrUnknownPool is returned for a pool name that does not exist. The
	// error it comes wrapped in lists the pools that do.
	ErrUnknownPool = errors.New("unknown pool")

	// ErrPoolExists is returned when creating a pool that exists with other
	// settings, without asking to update it.
	ErrPoolExists = errors.New("pool exists with other settings")

	// ErrInvalidPool is returned for pool settings that are not valid; the
	// error it comes wrapped in names the setting.
	ErrInvalidPool = errors.New("invalid pool")

	// ErrPoolBusy is returned when deleting a pool that has unfinished jobs
	// without asking to delete them too.
	ErrPoolBusy = errors.New("pool has unfinished jobs")

	// ErrHorizonMissing is returned when riverbus_horizon has no row: the
	// horizon cannot move and no pool is fanned out until it is repaired.
	ErrHorizonMissing = errors.New(`riverbus_horizon has no row: the horizon cannot move and no pool is fanned out; ` +
		`repair it (riverbus repair horizon) after finding out what deleted it`)

	// ErrDeadLetterNotFound is returned for a job id that is not a dead
	// letter (anymore).
	ErrDeadLetterNotFound = errors.New("dead letter not found")

	// ErrUndeliverable is returned when retrying a dead letter whose event
	// still cannot become a job (too big or too deeply nested): repair the
	// event first.
	ErrUndeliverable = errors.New("event still cannot become a job")
)
