package service_test

import (
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

	t.Run("FullBufferDropsTheOldest", func(t *testing.T) {
		t.Parallel()
		var s service.TestSignal[int]
		s.Init(t)
		for i := range 1000 {
			s.Signal(i)
		}
		first := s.WaitOrTimeout()
		require.Greater(t, first, 800, "the oldest values were dropped")
		require.Equal(t, 999, s.WaitFor("the last value", func(v int) bool { return v == 999 }))
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
