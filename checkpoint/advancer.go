package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/service"
)

// AdvancerConfig is the checkpoint advancer's configuration.
type AdvancerConfig struct {
	// Interval is how often the checkpoints advance; it must be positive.
	Interval time.Duration
	// Logger receives its failures.
	Logger *slog.Logger
}

// Advancer advances every pool's checkpoint
// (AdvanceAll) each interval.
type Advancer struct {
	db  *pgxpool.Pool
	cfg AdvancerConfig

	// TestSignals lets tests wait for what Run did.
	TestSignals AdvancerTestSignals
}

// AdvancerTestSignals are the checkpoint advancer's test signals, for the
// client's tests that wait for an advance.
type AdvancerTestSignals struct {
	// Advanced receives the checkpoints, by pool, of every advance that
	// succeeded.
	Advanced service.TestSignal[map[string]int64]
}

// Init makes every signal record values; tests only, before Run.
func (ts *AdvancerTestSignals) Init(tb service.TB) { ts.Advanced.Init(tb) }

// NewAdvancer validates cfg and returns a checkpoint advancer
// over db.
func NewAdvancer(db *pgxpool.Pool, cfg *AdvancerConfig) (*Advancer, error) {
	c := *cfg
	if c.Interval <= 0 {
		return nil, fmt.Errorf("checkpoint advancer: interval must be positive, got %s", c.Interval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Advancer{db: db, cfg: c}, nil
}

// Run advances every pool's checkpoint each interval until ctx ends, then
// returns nil. A failure is logged once, and again when advancing works
// again; it is retried at the next interval.
func (a *Advancer) Run(ctx context.Context) error {
	ticker := time.NewTicker(a.cfg.Interval)
	defer ticker.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		cps, err := AdvanceAll(ctx, a.db)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			a.cfg.Logger.Warn("checkpoint advancer: advancing failed; will retry", health.Operation(health.OpCheckpointAdvance), "error", err)
			failing = true
		case err == nil && failing:
			a.cfg.Logger.Info("checkpoint advancer: advancing again")
			failing = false
		}
		if err == nil {
			a.TestSignals.Advanced.Signal(cps)
		}
	}
}
