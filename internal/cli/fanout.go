package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/engine"
)

func (a *app) fanoutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fanout",
		Short: "Advance the horizon and turn events into pool jobs until SIGINT/SIGTERM",
		Long: `Runs the horizon and the fan-out of every active pool. Run as many as you like:
instances share the work through row and advisory locks, no leader needed.
A database outage is logged and retried with backoff.`,
		Example: `  RIVERBUS_GAP_TIMEOUT=10s riverbus fanout
  riverbus fanout --gap-timeout 10s --batch-size 500`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := a.requireURL()
			if err != nil {
				return err
			}
			db, err := a.connectRetrying(cmd.Context(), u)
			if err != nil {
				if cmd.Context().Err() != nil {
					return nil
				}
				return err
			}
			defer db.Close()
			if err := requireSchema(cmd.Context(), db, u); err != nil {
				return err
			}
			a.logger.Info("fan-out started", "database", describeHost(u), "gap_timeout", a.cfg.GapTimeout,
				"poll_interval", a.cfg.PollInterval, "batch_size", a.cfg.BatchSize)
			err = a.runFanout(cmd.Context(), db, nil)
			a.logger.Info("fan-out stopped")
			return err
		},
	}
	a.fanoutFlags(cmd)
	return cmd
}

// runFanout runs the fan-out and the checkpoint advancer until ctx ends.
func (a *app) runFanout(ctx context.Context, db *pgxpool.Pool, onBatch func(fanout.BatchResult)) error {
	f, err := engine.New(db, &fanout.Config{
		GapTimeout:       a.cfg.GapTimeout,
		GapCheckInterval: a.cfg.GapCheckInterval,
		PollInterval:     a.cfg.PollInterval,
		BatchSize:        a.cfg.BatchSize,
		Workers:          a.cfg.FanoutWorkers,
		Logger:           a.logger,
		OnBatch:          onBatch,
	})
	if err != nil {
		return err
	}
	advancer, err := engine.NewCheckpointAdvancer(db, &engine.CheckpointAdvancerConfig{Interval: 250 * time.Millisecond, Logger: a.logger})
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.Run(ctx) })
	g.Go(func() error { return advancer.Run(ctx) })
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("fan-out: %w", err)
	}
	return nil
}
