package retention

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/service"
	"github.com/riverbus/riverbus/migrations"
)

// IntervalDefault is how often the service applies the policy by default.
const IntervalDefault = time.Minute

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Interval is how often the policy is applied. Zero: IntervalDefault.
	Interval time.Duration
	// BatchSize is the most events one transaction deletes. Zero:
	// BatchSizeDefault.
	BatchSize int
	// Now is the clock the keep period is measured against. Nil: the
	// database's now().
	Now func() time.Time
	// Logger receives what it deleted and its failures. Nil:
	// slog.Default().
	Logger *slog.Logger
	// Gate stops the service when the schema needs newer code than it
	// knows (its batches refuse then). Nil: a gate of its own, for this
	// build's schema.
	Gate *migrations.Gate
}

// Service applies the retention policy every Interval (Trim), when one is
// set; without one it only reads the policy. Any number of processes may
// run it: their batches take turns on the retention lock, and each resumes
// where the last one stopped.
type Service struct {
	db  database.DB
	cfg ServiceConfig

	// TestSignals lets tests wait for what Run did.
	TestSignals ServiceTestSignals
}

// ServiceTestSignals are the retention service's test signals.
type ServiceTestSignals struct {
	// Trimmed receives the result of every pass that succeeded, whether
	// it deleted anything or not.
	Trimmed service.TestSignal[bustype.RetentionPlan]
}

// Init makes every signal record values; tests only, before Run.
func (ts *ServiceTestSignals) Init(tb service.TB) { ts.Trimmed.Init(tb) }

// NewService validates cfg and returns a retention service over db.
func NewService(db database.DB, cfg *ServiceConfig) (*Service, error) {
	c := ServiceConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Interval == 0 {
		c.Interval = IntervalDefault
	}
	if c.Interval < 0 {
		return nil, fmt.Errorf("retention Interval must be positive, got %s", c.Interval)
	}
	if _, err := (&Opts{BatchSize: c.BatchSize}).batchSize(); err != nil {
		return nil, fmt.Errorf("retention %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Gate == nil {
		c.Gate = migrations.NewGate(0)
	}
	return &Service{db: db, cfg: c}, nil
}

// Run applies the policy at once and then every Interval until ctx ends,
// then returns nil. A pass that fails is logged and tried again at the
// next interval; a pass cut short by ctx rolls back its batch in flight
// only.
func (s *Service) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		plan, err := s.Pass(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case s.cfg.Gate.Stop(err):
			s.cfg.Logger.Error("retention stopped: the schema needs newer code", "error", err)
			return nil
		case err != nil && !failing:
			s.cfg.Logger.Warn("retention: trimming failed; will retry", health.Operation(health.OpRetention), "error", err)
			failing = true
		case err == nil && failing:
			s.cfg.Logger.Info("retention: trimming again")
			failing = false
		}
		if err == nil {
			s.TestSignals.Trimmed.Signal(*plan)
		}
		timer.Reset(service.Jitter(s.cfg.Interval))
	}
}

// Pass applies the policy once (Trim) and logs what it deleted.
func (s *Service) Pass(ctx context.Context) (*bustype.RetentionPlan, error) {
	plan, err := Trim(ctx, s.db, &Opts{Now: s.cfg.Now, BatchSize: s.cfg.BatchSize, Code: s.cfg.Gate.Code()})
	if err != nil {
		return plan, err
	}
	if plan.Events > 0 {
		args := []any{"events", plan.Events, "from", plan.From, "through", plan.Through, "batches", plan.Batches,
			"stopped_by", string(plan.StoppedBy)}
		if h := plan.HeldBy(); h != nil {
			args = append(args, "floor", plan.Floor, "held_by", h.Rule+" "+h.Holder)
		}
		s.cfg.Logger.Info("retention: deleted events", args...)
	}
	return plan, nil
}
