package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/riverbus/riverbus/internal/metrics"
	"github.com/riverbus/riverbus/internal/ui"
)

// listeners opens the UI and metrics listeners before anything else starts,
// so a busy port or a refused bind fails the command at once. Either may be
// nil: metrics when RIVERBUS_METRICS_ADDR is empty, the UI when withUI is
// false.
func (a *app) listeners(withUI bool) (uiLn, metricsLn net.Listener, err error) {
	if withUI {
		if err := ui.CheckBind(a.cfg.UIAddr, a.cfg.UIUser, a.cfg.UIPassword); err != nil {
			return nil, nil, err
		}
		if uiLn, err = net.Listen("tcp", a.cfg.UIAddr); err != nil {
			return nil, nil, fmt.Errorf("River UI: listen on %s (RIVERBUS_UI_ADDR or --ui-addr): %w", a.cfg.UIAddr, err)
		}
	}
	if a.cfg.MetricsAddr != "" {
		if err := ui.CheckMetricsBind(a.cfg.MetricsAddr, a.cfg.MetricsUser, a.cfg.MetricsPassword); err != nil {
			if uiLn != nil {
				uiLn.Close()
			}
			return nil, nil, err
		}
		if metricsLn, err = net.Listen("tcp", a.cfg.MetricsAddr); err != nil {
			if uiLn != nil {
				uiLn.Close()
			}
			return nil, nil, fmt.Errorf("metrics: listen on %s (RIVERBUS_METRICS_ADDR or --metrics-addr): %w", a.cfg.MetricsAddr, err)
		}
	}
	return uiLn, metricsLn, nil
}

// serve runs River UI and the metrics endpoint on the given listeners (nil
// ones are skipped) in g until ctx ends.
func (a *app) serve(ctx context.Context, g *errgroup.Group, db *pgxpool.Pool, uiLn, metricsLn net.Listener) error {
	if uiLn != nil {
		// The riverbus page reads Status through this process's client,
		// as `riverbus status` does.
		operator, err := a.newClient(db, nil, true)
		if err != nil {
			return err
		}
		h, err := ui.NewHandler(ctx, db, ui.Opts{User: a.cfg.UIUser, Password: a.cfg.UIPassword, Logger: a.riverLogger,
			StatusFunc: operator.Status})
		if err != nil {
			return err
		}
		if err := h.Start(ctx); err != nil {
			return fmt.Errorf("River UI: %w", err)
		}
		g.Go(func() error {
			defer h.Stop()
			return ui.ServeListener(ctx, uiLn, h, a.serveOpts())
		})
	}
	if metricsLn != nil {
		// Scrapes read the database on connections of their own, so a
		// flood of them cannot take the fan-out's or the UI's; and at most
		// once a second (metrics.MaxAgeDefault), however many there are.
		mcfg := db.Config().Copy()
		mcfg.MaxConns, mcfg.MinConns = metricsMaxConns, 0
		mdb, err := pgxpool.NewWithConfig(ctx, mcfg)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		var h http.Handler = metrics.Handler(metrics.NewRegistry(mdb, &metrics.CollectorOpts{Logger: a.logger}))
		if a.cfg.MetricsUser != "" {
			h = ui.BasicAuth(h, a.cfg.MetricsUser, a.cfg.MetricsPassword)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", h)
		g.Go(func() error {
			defer mdb.Close()
			return ui.ServeListener(ctx, metricsLn, mux, a.serveOpts())
		})
	}
	return nil
}

// metricsMaxConns bounds the database connections scrapes use.
const metricsMaxConns = 1

func (a *app) serveOpts() ui.ServeOpts {
	return ui.ServeOpts{AllowedHosts: a.cfg.UIAllowedHosts, Logger: a.logger}
}

func listenerURL(ln net.Listener, path string) string {
	return "http://" + ln.Addr().String() + path
}

func (a *app) uiCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve River UI, the riverbus page (and metrics) for the database",
		Long: `Serves River UI on --ui-addr (RIVERBUS_UI_ADDR, default 127.0.0.1:8080), with the
riverbus page (horizon, and per pool its condition, lag, checkpoint holder,
dead letters, gaps and late events) at /riverbus/ beside it, and the
metrics endpoint on --metrics-addr (RIVERBUS_METRICS_ADDR). With a user and a
password set (RIVERBUS_UI_USER and RIVERBUS_UI_PASSWORD), the UI requires HTTP
basic auth; binding anything but a loopback address without them is refused.`,
		Example: `  riverbus ui
  riverbus ui --ui-addr 127.0.0.1:8181 --metrics-addr ""
  RIVERBUS_UI_ADDR=0.0.0.0:8080 RIVERBUS_UI_USER=ops RIVERBUS_UI_PASSWORD=... riverbus ui`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			u, err := a.requireURL()
			if err != nil {
				return err
			}
			uiLn, metricsLn, err := a.listeners(true)
			if err != nil {
				return err
			}
			db, err := a.connectRetrying(ctx, u, "riverbus ui")
			if err != nil {
				uiLn.Close()
				if metricsLn != nil {
					metricsLn.Close()
				}
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			defer db.Close()
			if err := requireSchema(ctx, db, u); err != nil {
				uiLn.Close()
				if metricsLn != nil {
					metricsLn.Close()
				}
				return err
			}
			g, gctx := errgroup.WithContext(ctx)
			if err := a.serve(gctx, g, db, uiLn, metricsLn); err != nil {
				return err
			}
			g.Go(func() error { return a.watchSchema(gctx, db) })
			fmt.Fprintf(a.stdout, "River UI: %s\n", listenerURL(uiLn, "/"))
			fmt.Fprintf(a.stdout, "riverbus: %s\n", listenerURL(uiLn, ui.PagePath))
			if metricsLn != nil {
				fmt.Fprintf(a.stdout, "metrics:  %s\n", listenerURL(metricsLn, "/metrics"))
			}
			return g.Wait()
		},
	}
	a.serveFlags(cmd)
	return cmd
}

// processMetricsFlags adds the settings of this process's own metrics
// endpoint: fanout and work.
func (a *app) processMetricsFlags(cmd *cobra.Command) {
	f, c := cmd.Flags(), a.cfg
	stringSetting(f, &c.ProcessMetricsAddr, "PROCESS_METRICS_ADDR")
	stringSetting(f, &c.MetricsUser, "METRICS_USER")
	secretSetting(f, &c.MetricsPassword, "METRICS_PASSWORD")
}

// serveProcessMetrics serves this process's own metrics
// (metrics.NewProcessRegistry) on RIVERBUS_PROCESS_METRICS_ADDR until ctx
// ends, and returns at once: nothing when the address is empty, an error
// when it cannot listen there. It reads nothing from the database, so any
// number of fan-out and worker processes can be scraped without loading it.
func (a *app) serveProcessMetrics(ctx context.Context) error {
	addr := a.cfg.ProcessMetricsAddr
	if addr == "" {
		return nil
	}
	if err := ui.CheckProcessMetricsBind(addr, a.cfg.MetricsUser, a.cfg.MetricsPassword); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("process metrics: listen on %s (RIVERBUS_PROCESS_METRICS_ADDR or --process-metrics-addr): %w", addr, err)
	}
	var h http.Handler = metrics.Handler(metrics.NewProcessRegistry())
	if a.cfg.MetricsUser != "" {
		h = ui.BasicAuth(h, a.cfg.MetricsUser, a.cfg.MetricsPassword)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	a.logger.Info("process metrics", "url", listenerURL(ln, "/metrics"))
	go func() {
		if err := ui.ServeListener(ctx, ln, mux, a.serveOpts()); err != nil {
			a.logger.Error("process metrics stopped", "error", err)
		}
	}()
	return nil
}
