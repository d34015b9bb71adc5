package testwait_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/testwait"
)

// fatalTB records Fatalf and stops the caller as testing.T's would.
type fatalTB struct {
	testing.TB
	msg string
}

type stopped struct{}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

// run calls wait with a fatalTB and returns what it failed with ("" if it
// did not fail).
func run(wait func(tb testing.TB)) string {
	tb := &fatalTB{}
	func() {
		defer func() {
			if r := recover(); r != nil && r != (stopped{}) {
				panic(r)
			}
		}()
		wait(tb)
	}()
	return tb.msg
}

func TestEventually(t *testing.T) {
	t.Parallel()
	t.Run("ReturnsOnceCondHolds", func(t *testing.T) {
		t.Parallel()
		calls := 0
		testwait.Eventually(t, time.Minute, func() bool { calls++; return calls == 3 }, "third call")
		require.Equal(t, 3, calls)
	})
	t.Run("FailsAtTheDeadlineWithTheLastValue", func(t *testing.T) {
		t.Parallel()
		var seen struct{ Calls int }
		msg := run(func(tb testing.TB) {
			testwait.Eventually(tb, 50*time.Millisecond, func() bool { seen.Calls++; return false }, "%s (now %+v)", "a call", &seen)
		})
		require.Greater(t, seen.Calls, 1)
		require.Equal(t, fmt.Sprintf("timed out after 50ms waiting for: a call (now &{Calls:%d})", seen.Calls), msg,
			"the message shows the last value the condition saw")
	})
}

func TestNever(t *testing.T) {
	t.Parallel()
	t.Run("PassesWhenCondStaysFalse", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		var last time.Time
		testwait.Never(t, 50*time.Millisecond, func() bool { last = time.Now(); return false }, "never true")
		require.False(t, last.Before(start.Add(50*time.Millisecond)), "cond is watched to the end of the period")
	})
	t.Run("FailsAsSoonAsCondHolds", func(t *testing.T) {
		t.Parallel()
		msg := run(func(tb testing.TB) {
			testwait.Never(tb, time.Minute, func() bool { return true }, "%s happened", "it")
		})
		require.Equal(t, "unexpectedly: it happened", msg)
	})
}
