package lanes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/lanes"
)

// A queue with a limit runs at most that many handlers at once; a job
// that waits for a handler slot until its context ends is snoozed back
// to available (no attempt spent) without its handler running; a handler
// that panics frees its slot.
func TestHandoffLimitsHandlersPerQueue(t *testing.T) {
	t.Parallel()
	m := lanes.NewHandoff(map[string]int{"ord": 1})
	job := &rivertype.JobRow{ID: 1, Queue: "ord", Metadata: []byte(`{}`)}

	release := make(chan struct{})
	running := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- m.Work(context.Background(), job, func(context.Context) error {
			close(running)
			<-release
			return nil
		})
	}()
	<-running

	// The only slot is taken: the second job waits, and its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err := m.Work(ctx, job, func(context.Context) error { ran = true; return nil })
	var snooze *rivertype.JobSnoozeError
	require.True(t, errors.As(err, &snooze), "got %v", err)
	require.Zero(t, snooze.Duration)
	require.False(t, ran, "a job past its context ran its handler")

	// Another queue is not limited by this one.
	other := &rivertype.JobRow{ID: 2, Queue: "other", Metadata: []byte(`{}`)}
	require.NoError(t, m.Work(context.Background(), other, func(context.Context) error { return nil }))

	close(release)
	require.NoError(t, <-first)

	// A panicking handler (River recovers it) frees the slot.
	require.Panics(t, func() {
		_ = m.Work(context.Background(), job, func(context.Context) error { panic("boom") })
	})
	done := make(chan error, 1)
	go func() {
		done <- m.Work(context.Background(), job, func(context.Context) error { return river.JobCancel(errors.New("x")) })
	}()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the slot a panicking handler held was never freed")
	}
}
