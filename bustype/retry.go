package bustype

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Retry schedule defaults: the schedule of a pool created without one, and
// of every pool that existed before migration 014. 1s, 2s, 4s … 2m8s, then
// 3m for every later attempt: a job of the default 25 attempts becomes a
// dead letter about 52 minutes after its first failure, where River's
// default (attempt⁴ seconds) takes about 20 days, holding the pool's
// checkpoint all that time.
const (
	RetryBaseDefault     = time.Second
	RetryFactorDefault   = 2.0
	RetryMaxDelayDefault = 3 * time.Minute
	RetryJitterDefault   = 0.1
)

// Retry schedule limits, as migration 014's CHECK constraints hold them.
const (
	RetryDelayMin     = time.Millisecond
	RetryMaxDelayMax  = 7 * 24 * time.Hour
	RetryFactorMax    = 10.0
	retryDelayQuantum = time.Microsecond // PostgreSQL's interval precision
)

// RetrySchedule is when a pool's failed job is attempted again: after the
// n-th failure, Base × Factor^(n-1), at most MaxDelay, shortened by a
// random fraction of up to Jitter so that jobs that failed together do not
// retry together. A Retry-After a handler asks for (workers.RetryAfter, a
// webhook's Retry-After header) lengthens a delay up to MaxDelay, never
// beyond.
//
// In PoolParams a zero field means the default (RetryBaseDefault, ...),
// and Jitter -1 means no jitter. In a Pool the fields are the schedule in
// force (Jitter 0: none).
type RetrySchedule struct {
	// Base is the delay after the first failure: at least 1ms.
	Base time.Duration
	// Factor multiplies the delay after each further failure: 1 (a fixed
	// delay) to 10.
	Factor float64
	// MaxDelay caps every delay: at least Base, at most 7 days.
	MaxDelay time.Duration
	// Jitter is the largest fraction by which a delay is shortened at
	// random: 0 (none) to 1.
	Jitter float64
}

// RetryScheduleDefault is the schedule of a pool created without one.
var RetryScheduleDefault = RetrySchedule{
	Base: RetryBaseDefault, Factor: RetryFactorDefault, MaxDelay: RetryMaxDelayDefault, Jitter: RetryJitterDefault,
}

// WithDefaults returns s with its zero fields set to the defaults and
// Jitter -1 turned into 0, rounded to the microseconds PostgreSQL keeps.
func (s RetrySchedule) WithDefaults() RetrySchedule {
	if s.Base == 0 {
		s.Base = RetryBaseDefault
	}
	if s.Factor == 0 {
		s.Factor = RetryFactorDefault
	}
	if s.MaxDelay == 0 {
		s.MaxDelay = max(RetryMaxDelayDefault, s.Base)
	}
	switch s.Jitter {
	case 0:
		s.Jitter = RetryJitterDefault
	case -1:
		s.Jitter = 0
	}
	s.Base = s.Base.Round(retryDelayQuantum)
	s.MaxDelay = s.MaxDelay.Round(retryDelayQuantum)
	return s
}

// Validate returns an error wrapping ErrInvalidPool that names the first
// field of s out of range. It checks a schedule in force (after
// WithDefaults).
func (s RetrySchedule) Validate() error {
	switch {
	case s.Base < RetryDelayMin:
		return fmt.Errorf("%w: retry base must be at least %s, got %s", ErrInvalidPool, RetryDelayMin, s.Base)
	case math.IsNaN(s.Factor) || s.Factor < 1 || s.Factor > RetryFactorMax:
		return fmt.Errorf("%w: retry factor must be between 1 and %g, got %g", ErrInvalidPool, RetryFactorMax, s.Factor)
	case s.MaxDelay < s.Base:
		return fmt.Errorf("%w: retry max delay must be at least the retry base (%s), got %s", ErrInvalidPool, s.Base, s.MaxDelay)
	case s.MaxDelay > RetryMaxDelayMax:
		return fmt.Errorf("%w: retry max delay must be at most %s, got %s", ErrInvalidPool, RetryMaxDelayMax, s.MaxDelay)
	case math.IsNaN(s.Jitter) || s.Jitter < 0 || s.Jitter > 1:
		return fmt.Errorf("%w: retry jitter must be between 0 and 1 (-1 for none in PoolParams), got %g", ErrInvalidPool, s.Jitter)
	}
	return nil
}

// Delay returns the delay after failure number failures (1 for the first)
// before jitter: Base × Factor^(failures-1), at most MaxDelay.
func (s RetrySchedule) Delay(failures int) time.Duration {
	d := float64(s.Base) * math.Pow(s.Factor, float64(max(failures, 1)-1))
	if math.IsNaN(d) || d >= float64(s.MaxDelay) {
		return s.MaxDelay
	}
	return time.Duration(d)
}

// Jittered returns delay shortened by the fraction Jitter × r, for r in
// [0, 1) drawn at random by the caller.
func (s RetrySchedule) Jittered(delay time.Duration, r float64) time.Duration {
	return delay - time.Duration(float64(delay)*s.Jitter*r)
}

// String is the schedule as the CLI's flags give it.
func (s RetrySchedule) String() string {
	return fmt.Sprintf("base=%s factor=%g max_delay=%s jitter=%g", s.Base, s.Factor, s.MaxDelay, s.Jitter)
}

type retryScheduleJSON struct {
	Base     string  `json:"base"`
	Factor   float64 `json:"factor"`
	MaxDelay string  `json:"max_delay"`
	Jitter   float64 `json:"jitter"`
}

// MarshalJSON writes the delays as Go durations ("1s", "3m0s").
func (s RetrySchedule) MarshalJSON() ([]byte, error) {
	return json.Marshal(retryScheduleJSON{Base: s.Base.String(), Factor: s.Factor, MaxDelay: s.MaxDelay.String(), Jitter: s.Jitter})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *RetrySchedule) UnmarshalJSON(b []byte) error {
	var j retryScheduleJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var out RetrySchedule
	var err error
	if j.Base != "" {
		if out.Base, err = time.ParseDuration(j.Base); err != nil {
			return fmt.Errorf("retry base: %w", err)
		}
	}
	if j.MaxDelay != "" {
		if out.MaxDelay, err = time.ParseDuration(j.MaxDelay); err != nil {
			return fmt.Errorf("retry max delay: %w", err)
		}
	}
	out.Factor, out.Jitter = j.Factor, j.Jitter
	*s = out
	return nil
}
