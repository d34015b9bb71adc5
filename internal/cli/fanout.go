package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

func (a *app) fanoutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fanout",
		Short: "Advance the horizon and turn events into pool jobs until SIGINT/SIGTERM",
		Long: `Runs the horizon and the fan-out of every active pool. Run as many as you like:
instances share the work through row and table locks, no leader needed.
A database outage is logged and retried with backoff.`,
		Example: `  RIVERBUS_GAP_TIMEOUT=10s riverbus fanout
  riverbus fanout --gap-timeout 10s --batch-size 500
  riverbus fanout --process-metrics-addr 127.0.0.1:9091   # this process's round and batch times`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.serveProcessMetrics(cmd.Context()); err != nil {
				return err
			}
			u, err := a.requireURL()
			if err != nil {
				return err
			}
			db, err := a.connectRetrying(cmd.Context(), u, "riverbus fanout")
			if err != nil {
				if cmd.Context().Err() != nil {
					return nil
				}
				return err
			}
			defer db.Close()
			if err := requireSchema(cmd.Context(), db, u); err != nil {
				if cmd.Context().Err() != nil {
					return nil // stopped while starting: a clean stop, as above
				}
				return err
			}
			a.logger.Info("fan-out started", "database", describeHost(u), "gap_timeout", a.cfg.GapTimeout,
				"poll_interval", a.cfg.PollInterval, "batch_size", a.cfg.BatchSize)
			err = a.runFanout(cmd.Context(), db)
			a.logger.Info("fan-out stopped")
			return err
		},
	}
	a.fanoutFlags(cmd)
	a.retentionFlags(cmd)
	a.processMetricsFlags(cmd)
	return cmd
}

// runFanout runs a riverbus client without workers (the horizon, the
// fan-out and its maintenance services) until ctx ends.
func (a *app) runFanout(ctx context.Context, db *pgxpool.Pool) error {
	a.processName = "riverbus fanout"
	flush, err := a.startTracing(ctx)
	if err != nil {
		return err
	}
	defer flush()
	client, err := a.newClient(db, nil, false)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: a clean stop
		}
		return fmt.Errorf("fan-out: %w", err)
	}
	stopped := waitClient(ctx, client)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil && stopped == nil {
		return err
	}
	return stopped
}
