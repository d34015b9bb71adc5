package fanout

import (
	"context"
	"time"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/tracing"
	"github.com/riverbus/riverbus/migrations"
)

// SetGroupPartBounds sets the most events and JSON bytes of one part of a
// transaction group, and returns a function that restores the defaults.
// Tests that call it must not run in parallel.
func SetGroupPartBounds(events, bytes int) (restore func()) {
	e, b := groupPartMaxEvents, groupPartMaxBytes
	groupPartMaxEvents, groupPartMaxBytes = events, bytes
	return func() { groupPartMaxEvents, groupPartMaxBytes = e, b }
}

// SetAnalyzeJobsMin sets how many jobs the pools' service inserts before
// it first analyzes river_job; call it before Run.
func (s *PoolService) SetAnalyzeJobsMin(n int) { s.analyzer.min = n }

// JobMetadataOf is the metadata of the job of an unordered pool for an
// event with metadata (jobMetadata).
func JobMetadataOf(metadata []byte) []byte {
	return jobMetadata(false, unit{trace: tracing.FromMetadata(metadata)})
}

// SetLockHeldAfter shortens lockHeldAfter for s.
func (s *HorizonService) SetLockHeldAfter(d time.Duration) { s.lockMissed.after = d }

// The horizon round and service, for the tests that run them without a
// fan-out.
type (
	RoundParams          = roundParams
	HorizonServiceConfig = horizonServiceConfig
)

var (
	Advance           = advance
	NewHorizonService = newHorizonService
)

// FanOutPool is fanOutPool: one batch of pool name.
func (f *Fanout) FanOutPool(ctx context.Context, name string) (BatchResult, bool, error) {
	return f.fanOutPool(ctx, name)
}

// UsesPlainPath is usesPlainPath.
func (f *Fanout) UsesPlainPath(pool string) bool { return f.usesPlainPath(pool) }

// Gate returns the gate the fan-out's rounds and batches check.
func (f *Fanout) Gate() *migrations.Gate { return f.gate }

// LockHeld is lockHeld.
func (s *HorizonService) LockHeld() (since time.Time, holders []database.LockHolder) {
	return s.lockHeld()
}
