package bustype

import (
	"errors"
	"fmt"
	"time"
)

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

// ErrReplayDeadLetters is returned by the wait for a pool's replay (a
// reset) when some of the events it delivered again became dead letters.
var ErrReplayDeadLetters = errors.New("replayed events became dead letters")

// StartBeyondLogError is the error for a pool start point (PoolParams.From,
// a reset's position) above the end of the log: the last sequence handed
// out, or the horizon when that is higher. A pool there would never get the
// events that receive the numbers in between. It wraps ErrInvalidPool.
type StartBeyondLogError struct {
	// What names the start point: "start sequence", "reset position".
	What string
	// Position is the start point refused.
	Position int64
	// LastSequence is the last sequence handed out (0: none yet), Horizon
	// the horizon, when the start point was refused.
	LastSequence, Horizon int64
}

// End is where the log ends: the highest start point allowed.
func (e *StartBeyondLogError) End() int64 { return max(e.LastSequence, e.Horizon) }

func (e *StartBeyondLogError) Error() string {
	var where, instead string
	switch {
	case e.End() == 0:
		where, instead = "no event appended yet", "give 0 (the beginning)"
	case e.Horizon > e.LastSequence:
		where = fmt.Sprintf("horizon %d, above the last sequence handed out %d", e.Horizon, e.LastSequence)
	default:
		where = fmt.Sprintf("last sequence handed out %d", e.LastSequence)
	}
	if instead == "" {
		instead = fmt.Sprintf("give %d or less", e.End())
	}
	return fmt.Sprintf("%s: %s %d is beyond the end of the log (%s): the next %d events appended would never reach the pool; %s",
		ErrInvalidPool, e.What, e.Position, where, e.Position-e.End(), instead)
}

// Unwrap returns ErrInvalidPool.
func (e *StartBeyondLogError) Unwrap() error { return ErrInvalidPool }

// RewindRefusal says why a reset of a pool to a time was refused
// (RewindTimeError.Reason).
type RewindRefusal string

const (
	// RewindAfterEnd: the time is after the database's clock: no event
	// has committed after it yet.
	RewindAfterEnd RewindRefusal = "after_end"
	// RewindBeforeStart: the time is before the first event the log keeps
	// was appended: events committed after it are gone (retention) or
	// never were; the whole log is a reset to sequence 0.
	RewindBeforeStart RewindRefusal = "before_start"
	// RewindNotExact: the time is before riverbus's first record of when
	// events committed that reaches where the log begins (the upgrade that
	// began recording it, or the oldest record retention kept): which
	// events committed after it cannot be known, only guessed from when
	// their transactions began.
	RewindNotExact RewindRefusal = "not_exact"
)

// RewindTimeError is the error for a reset of a pool to a time (a rewind)
// that the log cannot answer exactly; it says where the log begins and
// ends. It wraps ErrInvalidPool.
type RewindTimeError struct {
	// Time is the time asked for.
	Time time.Time
	// Reason says why it was refused.
	Reason RewindRefusal
	// Now is the database's clock when it was refused.
	Now time.Time
	// FirstSequence is the first event the log keeps and FirstAppendedAt
	// when it was appended; LastSequence and LastAppendedAt the same of
	// the newest event. Zero when the log holds no event.
	FirstSequence, LastSequence     int64
	FirstAppendedAt, LastAppendedAt time.Time
	// ExactFrom is the earliest time a rewind is exact from: the first
	// record of when events committed that reaches where the log begins.
	// Zero when there is none yet.
	ExactFrom time.Time
}

// RewindTimeFormat is how a rewind's messages write times: RFC 3339 in
// UTC, to the microsecond the database keeps ("2026-11-20T10:00:00.25Z"),
// which --to-time and time.Parse(time.RFC3339Nano, …) take back as is.
const RewindTimeFormat = "2006-01-02T15:04:05.999999Z07:00"

func rewindTime(t time.Time) string { return t.UTC().Format(RewindTimeFormat) }

// LogSpan says where the log begins and ends: "the log holds sequences
// 1 (appended 2026-11-20T09:00:00Z) to 500 (appended
// 2026-11-21T08:00:00Z)".
func (e *RewindTimeError) LogSpan() string {
	if e.LastSequence == 0 {
		return "the log holds no event"
	}
	return fmt.Sprintf("the log holds sequences %d (appended %s) to %d (appended %s)", e.FirstSequence,
		rewindTime(e.FirstAppendedAt), e.LastSequence, rewindTime(e.LastAppendedAt))
}

func (e *RewindTimeError) Error() string {
	var why string
	switch e.Reason {
	case RewindAfterEnd:
		why = fmt.Sprintf("is after the end of the log: the database's clock reads %s, so no event has committed after it; %s",
			rewindTime(e.Now), e.LogSpan())
	case RewindBeforeStart:
		why = fmt.Sprintf("is before the start of the log: %s; events committed after that time are no longer all in it, "+
			"or were never appended; reset to sequence 0 to re-deliver the whole log", e.LogSpan())
	default:
		since := "riverbus has no record yet of when events committed that reaches where the log begins"
		if !e.ExactFrom.IsZero() {
			since = fmt.Sprintf("riverbus knows which events committed after a time only from %s on "+
				"(since the upgrade that began recording it, or the oldest record retention kept)", rewindTime(e.ExactFrom))
		}
		why = fmt.Sprintf("cannot be rewound to exactly: %s; %s; before it, when a transaction began does not say when it committed, "+
			"so reset to a sequence instead", since, e.LogSpan())
	}
	return fmt.Sprintf("%s: reset time %s %s (times in UTC)", ErrInvalidPool, rewindTime(e.Time), why)
}

// Unwrap returns ErrInvalidPool.
func (e *RewindTimeError) Unwrap() error { return ErrInvalidPool }

// SessionLimitError is riverbus.Client.Start's error for a pool whose
// sessions limit statements, lock waits or idle transactions below what
// riverbus's statements may need; it names the setting, its value and
// where it was set (see riverbus.ConfigurePool).
type SessionLimitError struct {
	// Setting is the setting's name ("statement_timeout").
	Setting string
	// Value is the session's value, as SHOW prints it ("30ms").
	Value string
	// Source is where the value came from, as pg_settings says: "database"
	// (ALTER DATABASE … SET), "user" (ALTER ROLE … SET), "database user",
	// "configuration file", "session" (SET, or the connection's options).
	Source string
	// Need is riverbus's own value.
	Need time.Duration
}

func (e *SessionLimitError) Error() string {
	need := "the " + e.Need.String()
	if e.Need == 0 {
		need = "no limit, which"
	}
	return fmt.Sprintf("the pool's sessions run with %s = %s (set by %s), less than %s riverbus's statements may need: configure the pool with riverbus.ConfigurePool before pgxpool.NewWithConfig, which sets riverbus's limits on each connection (they override ALTER DATABASE and ALTER ROLE settings)",
		e.Setting, e.Value, describeSource(e.Source), need)
}

func describeSource(source string) string {
	switch source {
	case "database":
		return "ALTER DATABASE … SET"
	case "user":
		return "ALTER ROLE … SET"
	case "database user":
		return "ALTER ROLE … IN DATABASE … SET"
	case "session", "client":
		return "the connection (SET, or its options)"
	default:
		return "the server's " + source
	}
}
