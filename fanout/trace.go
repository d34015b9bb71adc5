package fanout

import (
	"time"
)

// Trace receives the fan-out's steps on the way from an append's commit to
// its jobs, as they happen: the bench's hop-by-hop latency breakdown uses
// it. Each field may be nil. They are called from the services' goroutines,
// so they must be quick and safe for concurrent use.
type Trace struct {
	// Round is called after each round this instance ran committed
	// (RoundResult.Locked), with when it committed.
	Round func(r RoundResult, at time.Time)
}

// SetTrace makes the fan-out report its steps to t; call it before Run.
func (f *Fanout) SetTrace(t Trace) { f.trace = t }
