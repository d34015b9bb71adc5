package workers

import (
	"errors"
	"time"
)

// RetryAfterError is a handler's error that asks for the job's next attempt
// to wait at least Delay, as an HTTP Retry-After header does. The pool's
// retry policy, which a riverbus.Client's River client runs, takes the
// longer of Delay and the pool's schedule, and never more than the pool's
// maximum delay (bustype.RetrySchedule.MaxDelay). Its text is Err's.
type RetryAfterError struct {
	Err   error
	Delay time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that the job's next attempt waits at least delay
// (up to the pool's maximum delay). A nil err stays nil; a negative delay
// counts as zero.
func RetryAfter(err error, delay time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, Delay: max(delay, 0)}
}

// RetryAfterOf returns the delay the outermost RetryAfterError in err's
// chain asks for, and whether there is one.
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return max(ra.Delay, 0), true
	}
	return 0, false
}
