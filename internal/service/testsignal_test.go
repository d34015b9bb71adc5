package service_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/service"
)

func TestTestSignal(t *testing.T) {
	t.Parallel()

	t.Run("ZeroValueIgnoresSignals", func(t *testing.T) {
		t.Parallel()
		var s service.TestSignal[int]
		for i := range 1000 {
			s.Signal(i) // never blocks
		}
	})

	t.Run("OverflowFailsTheNextWait", func(t *testing.T) {
		t.Parallel()
		var s service.TestSignal[int]
		tb := &fatalTB{}
		s.Init(tb)
		for i := range 1001 {
			s.Signal(i) // never blocks
		}
		require.Equal(t, "test signal of type int overflowed: 1 values were lost after 1000 unread ones; read the signal while the service runs, or Drain it before waiting",
			tb.wait(func() { s.WaitOrTimeout() }))
		require.NotEmpty(t, tb.wait(func() { s.WaitFor("any", func(int) bool { return true }) }), "WaitFor fails too")
	})

	t.Run("NoOverflowNoFailure", func(t *testing.T) {
		t.Parallel()
		var s service.TestSignal[int]
		tb := &fatalTB{}
		s.Init(tb)
		for i := range 1000 {
			s.Signal(i)
		}
		var got []int
		require.Empty(t, tb.wait(func() {
			for range 1000 {
				got = append(got, s.WaitOrTimeout())
			}
		}))
		require.Len(t, got, 1000)
		require.Equal(t, 0, got[0], "values come in order, none lost")
		require.Equal(t, 999, got[999])
	})

	t.Run("DrainForgetsTheOverflow", func(t *testing.T) {
		t.Parallel()
		var s service.TestSignal[int]
		tb := &fatalTB{}
		s.Init(tb)
		for i := range 2000 {
			s.Signal(i)
		}
		s.Drain()
		s.Signal(7)
		var got int
		require.Empty(t, tb.wait(func() { got = s.WaitOrTimeout() }))
		require.Equal(t, 7, got)
	})

	t.Run("DrainForgetsWhatCameBefore", func(t *testing.T) {
		t.Parallel()
		var s service.TestSignal[int]
		s.Init(t)
		s.Signal(1)
		s.Drain()
		s.Signal(2)
		require.Equal(t, 2, s.WaitOrTimeout())
	})
}

// fatalTB records Fatalf and stops the caller as testing.T's would.
type fatalTB struct{ msg string }

type stopped struct{}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

// wait runs f and returns what it failed the test with ("" if nothing).
func (f *fatalTB) wait(fn func()) string {
	f.msg = ""
	func() {
		defer func() {
			if r := recover(); r != nil && r != (stopped{}) {
				panic(r)
			}
		}()
		fn()
	}()
	return f.msg
}
