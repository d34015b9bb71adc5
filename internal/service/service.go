// Package service holds what riverbus's long-running services (the
// horizon, the pools' fan-out, the lane sweeper, the late-event retirer,
// the checkpoint advancer) share: how they back off after a failure, how
// one wakes another, and the test signals they send.
//
// Every service has a Run(ctx) error that blocks until ctx ends and then
// returns nil; database errors are logged and retried with a backoff of the
// service's own, never returned.
package service

import (
	"context"
	"math/rand/v2"
	"time"
)

// Service is a long-running part of riverbus: Run blocks until ctx ends,
// then returns nil.
type Service interface {
	Run(ctx context.Context) error
}

// NextBackoff doubles a failure backoff, from 100 ms to at most 10 s.
func NextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, 100*time.Millisecond), 10*time.Second)
}

// Jitter adds up to a quarter of d, so instances that failed together do
// not retry together.
func Jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}

// Wake wakes the loop that waits on ch (a channel with a buffer of one),
// unless a wake-up is already waiting.
func Wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// NewWake returns a channel for Wake.
func NewWake() chan struct{} { return make(chan struct{}, 1) }
