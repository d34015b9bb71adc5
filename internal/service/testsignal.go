package service

import (
	"fmt"
	"time"
)

// TB is the part of testing.TB a test signal uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// TestSignal lets a test wait for something a service did (a round, a
// batch, a sweep) instead of sleeping or polling (River's test signals).
// Its zero value, what production code has, ignores Signal; a test calls
// Init before the service runs and then waits with WaitOrTimeout.
//
// Signal never blocks: when the buffer is full the oldest value is dropped,
// so a busy loop (a round every few milliseconds) cannot stall. A test that
// wants only what happens from now on calls Drain first.
type TestSignal[T any] struct {
	ch chan T
	tb TB
}

// testSignalBuffer is how many values wait for a test before the oldest is
// dropped.
const testSignalBuffer = 100

// TestSignalTimeout is how long WaitOrTimeout waits.
const TestSignalTimeout = 10 * time.Second

// Init makes the signal record values. Tests only, before the service runs.
func (s *TestSignal[T]) Init(tb TB) {
	s.ch = make(chan T, testSignalBuffer)
	s.tb = tb
}

// Signal records v for a test; it does nothing unless Init was called.
func (s *TestSignal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	for {
		select {
		case s.ch <- v:
			return
		default:
		}
		select {
		case <-s.ch: // full: drop the oldest
		default:
		}
	}
}

// WaitOrTimeout returns the next value, failing the test after
// TestSignalTimeout.
func (s *TestSignal[T]) WaitOrTimeout() T {
	s.tb.Helper()
	if s.ch == nil {
		panic("test signal not initialised: call Init first")
	}
	select {
	case v := <-s.ch:
		return v
	case <-time.After(TestSignalTimeout):
		s.tb.Fatalf("timed out after %s waiting for a test signal of type %s", TestSignalTimeout, fmt.Sprintf("%T", *new(T)))
	}
	var zero T
	return zero
}

// WaitFor returns the first value for which cond holds, failing the test
// after TestSignalTimeout.
func (s *TestSignal[T]) WaitFor(what string, cond func(T) bool) T {
	s.tb.Helper()
	if s.ch == nil {
		panic("test signal not initialised: call Init first")
	}
	deadline := time.NewTimer(TestSignalTimeout)
	defer deadline.Stop()
	for {
		select {
		case v := <-s.ch:
			if cond(v) {
				return v
			}
		case <-deadline.C:
			s.tb.Fatalf("timed out after %s waiting for: %s", TestSignalTimeout, what)
			var zero T
			return zero
		}
	}
}

// Drain drops the values recorded so far.
func (s *TestSignal[T]) Drain() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}
