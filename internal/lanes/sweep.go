package lanes

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/service"
)

// ReleaseStuck makes available the next job of every ordered lane that has
// pending jobs and none in flight: the safety net behind the release
// trigger (for a job deleted while pending jobs of its lane were being
// inserted, say). It returns how many jobs it released.
func ReleaseStuck(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, sqlReleaseStuckLanes).Scan(&n); err != nil {
		return 0, fmt.Errorf("release stuck lanes: %w", err)
	}
	return n, nil
}

// PromoteRetries makes available the due retries of ordered pools' jobs,
// which River's scheduler would only pick up within 5 s, while each holds
// its key. It returns how many queues had retries promoted.
func PromoteRetries(ctx context.Context, db database.DB) (int64, error) {
	var n, notified int64
	if err := db.QueryRow(ctx, sqlPromoteLaneRetries).Scan(&n, &notified); err != nil {
		return 0, fmt.Errorf("promote due retries of ordered pools: %w", err)
	}
	return n, nil
}

// Sweep intervals: due retries are promoted every SweepInterval, stuck
// lanes released every StuckLaneInterval.
const (
	SweepInterval     = 250 * time.Millisecond
	StuckLaneInterval = 2 * time.Second
)

// SweeperConfig is the lane sweeper's configuration.
type SweeperConfig struct {
	// Logger receives the lanes it released and its failures.
	Logger *slog.Logger
}

// Sweeper is the safety net of ordered pools, a service beside the
// fan-out so it never delays a batch: it promotes due retries
// (PromoteRetries) every SweepInterval, and releases stuck lanes
// (ReleaseStuck) every StuckLaneInterval.
type Sweeper struct {
	db     *pgxpool.Pool
	logger *slog.Logger

	// TestSignals lets tests wait for what Run did.
	TestSignals SweeperTestSignals
}

// SweepResult says what one sweep did.
type SweepResult struct {
	// Promoted counts the queues whose due lane retries were promoted.
	Promoted int64
	// Released counts the jobs of stuck lanes released; -1 when this sweep
	// did not look for stuck lanes.
	Released int64
}

// SweeperTestSignals are the lane sweeper's test signals.
type SweeperTestSignals struct {
	// Swept receives what every successful sweep did.
	Swept service.TestSignal[SweepResult]
}

// Init makes every signal record values; tests only, before Run.
func (ts *SweeperTestSignals) Init(tb service.TB) { ts.Swept.Init(tb) }

// NewSweeper returns a lane sweeper over db.
func NewSweeper(db *pgxpool.Pool, cfg *SweeperConfig) *Sweeper {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Sweeper{db: db, logger: logger}
}

// Run sweeps until ctx ends, then returns nil. Failures are logged and
// retried with a backoff.
func (s *Sweeper) Run(ctx context.Context) error {
	var lastStuck time.Time
	backoff := time.Duration(0)
	for {
		wait := SweepInterval
		res := SweepResult{Released: -1}
		err := func() error {
			var err error
			if res.Promoted, err = PromoteRetries(ctx, s.db); err != nil {
				return err
			}
			if time.Since(lastStuck) < StuckLaneInterval {
				return nil
			}
			lastStuck = time.Now()
			res.Released, err = ReleaseStuck(ctx, s.db)
			if res.Released > 0 {
				s.logger.Warn("released ordered lanes that had no job in flight", "jobs", res.Released)
			}
			return err
		}()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			backoff = min(max(2*backoff, SweepInterval), 10*time.Second)
			wait = backoff
			s.logger.Warn("ordered pools' sweep failed; retrying", health.Operation(health.OpLaneSweep), "error", err, "retry_in", wait)
		default:
			backoff = 0
			s.TestSignals.Swept.Signal(res)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
