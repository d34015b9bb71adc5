package service

import (
	"fmt"
	"sync/atomic"
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
// Init before the service runs and then waits with WaitOrTimeout or
// WaitFor.
//
// Signal never blocks, so a busy loop (a round every few milliseconds)
// cannot stall on a test that stopped reading. When the buffer is full it
// loses the value, and the next wait fails the test: a wait must not see a
// sequence with values missing from it. A test that stops reading a signal
// for good is not failed by its overflow; one that wants only what happens
// from now on calls Drain first, which also forgets earlier losses.
type TestSignal[T any] struct {
	ch   chan T
	tb   TB
	lost atomic.Int64 // values Signal could not record since Init or Drain
}

// testSignalBuffer is how many values wait for a test before Signal loses
// them.
const testSignalBuffer = 1000

// TestSignalTimeout is how long WaitOrTimeout and WaitFor wait: generous,
// since they assert that something happens, not how fast, and a machine
// busy with other work may take seconds for a round.
const TestSignalTimeout = 30 * time.Second

// Init makes the signal record values. Tests only, before the service runs.
func (s *TestSignal[T]) Init(tb TB) {
	s.ch = make(chan T, testSignalBuffer)
	s.tb = tb
	s.lost.Store(0)
}

// Signal records v for a test; it does nothing unless Init was called.
func (s *TestSignal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.lost.Add(1)
	}
}

// checkLost fails the test when Signal lost values since Init or Drain.
func (s *TestSignal[T]) checkLost() {
	s.tb.Helper()
	if n := s.lost.Load(); n > 0 {
		s.tb.Fatalf("test signal of type %T overflowed: %d values were lost after %d unread ones; read the signal while the service runs, or Drain it before waiting",
			*new(T), n, testSignalBuffer)
	}
}

// WaitOrTimeout returns the next value, failing the test after
// TestSignalTimeout.
func (s *TestSignal[T]) WaitOrTimeout() T {
	s.tb.Helper()
	if s.ch == nil {
		panic("test signal not initialised: call Init first")
	}
	s.checkLost()
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
	s.checkLost()
	deadline := time.NewTimer(TestSignalTimeout)
	defer deadline.Stop()
	for {
		select {
		case v := <-s.ch:
			if cond(v) {
				return v
			}
			s.checkLost()
		case <-deadline.C:
			s.tb.Fatalf("timed out after %s waiting for: %s", TestSignalTimeout, what)
			var zero T
			return zero
		}
	}
}

// Drain drops the values recorded so far, and forgets those Signal lost.
func (s *TestSignal[T]) Drain() {
	for {
		select {
		case <-s.ch:
		default:
			s.lost.Store(0)
			return
		}
	}
}
