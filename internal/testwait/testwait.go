// Package testwait holds the tests' one way to wait for something that
// happens asynchronously: poll a condition until it holds or a deadline
// passes, never a bare sleep before an assertion. Tests only.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often Eventually and Never evaluate their condition.
const PollInterval = 10 * time.Millisecond

// Eventually polls cond every PollInterval until it returns true. When
// timeout passes first, it fails the test with Fatalf, saying what it waited
// for: msg formatted with args at that moment, so an argument that is a
// pointer shows the last value the condition saw. cond runs on the test's
// goroutine and may use require.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for: %s", timeout, fmt.Sprintf(msg, args...))
		}
		time.Sleep(PollInterval)
	}
}

// Never polls cond every PollInterval for d and fails the test with Fatalf,
// saying what happened (msg formatted with args), as soon as cond returns
// true: a wait that something does not happen for a while. Its last call
// of cond is at or after the end of d, however late a starved machine
// wakes it, so the whole period is watched.
func Never(tb testing.TB, d time.Duration, cond func() bool, msg string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		if cond() {
			tb.Fatalf("unexpectedly: %s", fmt.Sprintf(msg, args...))
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		time.Sleep(min(PollInterval, left))
	}
}
