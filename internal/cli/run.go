package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/internal/ui"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/workers"
)

func (a *app) runCommand() *cobra.Command {
	var (
		demo     bool
		demoRate int
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run fan-out, River UI and metrics (with --demo: demo pools, traffic and workers)",
		Long: `Runs the fan-out and the checkpoint advancer in this process. Without a
DATABASE_URL it starts a throwaway local PostgreSQL first (removed on exit);
with one it uses that database and removes nothing. It migrates before it
starts. Ctrl-C stops everything within seconds.

--demo also creates four demo pools (billing: invoices only, now and then a
poison one that is a dead letter within seconds; notifications: fails one
time in five, so retries and dead letters show; audit: an exactly-once
projection; accounts: ordered by customer), appends demo traffic and works
the jobs.`,
		Example: `  riverbus run --demo                 # what make run does
  DATABASE_URL=postgres://localhost/app riverbus run`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if demoRate < 0 || demoRate > 10_000 {
				return &usageError{cmd: cmd, err: fmt.Errorf("--demo-rate must be between 0 and 10000, got %d", demoRate)}
			}
			return a.run(cmd.Context(), demo, demoRate)
		},
	}
	cmd.Flags().BoolVar(&demo, "demo", false, "create demo pools, append demo traffic and run demo workers")
	cmd.Flags().IntVar(&demoRate, "demo-rate", 20, "demo transactions appended per second")
	a.fanoutFlags(cmd)
	a.retentionFlags(cmd)
	a.serveFlags(cmd)
	a.jobRetentionFlags(cmd)
	a.fetchFlags(cmd)
	return cmd
}

func (a *app) run(ctx context.Context, demo bool, demoRate int) error {
	a.processName = "riverbus run"
	uiLn, metricsLn, err := a.listeners(true)
	if err != nil {
		return err
	}
	closeListeners := func() {
		uiLn.Close()
		if metricsLn != nil {
			metricsLn.Close()
		}
	}
	dbURL := a.cfg.DatabaseURL
	throwaway := dbURL == ""
	if throwaway {
		fmt.Fprintln(a.stdout, "DATABASE_URL is not set: starting a throwaway PostgreSQL (removed when this exits)...")
		srv, u, err := a.startThrowaway(ctx)
		if err != nil {
			closeListeners()
			return err
		}
		fmt.Fprintf(a.stdout, "throwaway PostgreSQL on 127.0.0.1:%d (data in %s)\n", srv.Port(), srv.DataDir())
		defer func() {
			if err := srv.Stop(); err != nil {
				a.logger.Warn("stopping the throwaway PostgreSQL", "error", err)
			} else {
				fmt.Fprintln(a.stdout, "throwaway PostgreSQL stopped and removed")
			}
		}()
		dbURL = u
	}
	db, err := a.connectRetrying(ctx, dbURL, "riverbus run")
	if err != nil {
		closeListeners()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer db.Close()
	if _, err := migrations.UpWithOpts(ctx, db, &migrations.UpOpts{Logger: a.logger}); err != nil {
		closeListeners()
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	if err := a.serve(gctx, g, db, uiLn, metricsLn); err != nil {
		closeListeners()
		return err
	}
	flush, err := a.startTracing(ctx)
	if err != nil {
		closeListeners()
		return err
	}
	defer flush()
	var ws *workers.Registry
	if demo {
		if ws, err = setUpDemo(ctx, db); err != nil {
			return err
		}
	}
	client, err := a.newClient(db, ws, false)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	if demo {
		g.Go(func() error { return demoTraffic(gctx, db, demoRate, a.logger, a.tracerProvider) })
	}

	where := []string{"River UI:  " + listenerURL(uiLn, "/"), "riverbus:  " + listenerURL(uiLn, ui.PagePath)}
	if metricsLn != nil {
		where = append(where, "metrics:   "+listenerURL(metricsLn, "/metrics"))
	}
	if throwaway {
		where = append(where, fmt.Sprintf("database:  export DATABASE_URL='%s'", dbURL))
	}
	where = append(where, "status:    "+selfCommand()+" status --watch   "+databaseHint(throwaway))
	fmt.Fprintf(a.stdout, "riverbus is running. Where to look:\n  %s\nCtrl-C stops it.\n", strings.Join(where, "\n  "))

	g.Go(func() error {
		a.summaryLoop(gctx, client)
		return nil
	})
	g.Go(func() error { return waitClient(gctx, client) })
	err = g.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if stopErr := client.Stop(stopCtx); stopErr != nil {
		a.logger.Warn("stopping: jobs still running were cancelled", "error", stopErr)
	}
	fmt.Fprintln(a.stdout, "riverbus stopped")
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// summaryLoop prints a one-line summary every few seconds.
func (a *app) summaryLoop(ctx context.Context, client *riverbus.Client) {
	ticker := time.NewTicker(3 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		st, err := client.Status(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(a.stdout, "%s  status unavailable: %v\n", time.Now().Format("15:04:05"), err)
			}
			continue
		}
		fmt.Fprintln(a.stdout, oneLine(st))
	}
}

// selfCommand is the command that runs this binary from a shell: "riverbus"
// when that is what PATH finds, else the binary's path (./bin/riverbus after
// make build, a go run build), so that a command the banner prints works as
// printed.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "riverbus"
	}
	if found, err := exec.LookPath("riverbus"); err == nil && sameFile(found, exe) {
		return "riverbus"
	}
	return shellQuote(exe)
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// shellQuote quotes s for a POSIX shell, unless it needs no quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@%,=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// databaseHint says which database a command the banner prints needs.
func databaseHint(throwaway bool) string {
	if throwaway {
		return "(with DATABASE_URL set as above)"
	}
	return "(with DATABASE_URL set to this process's database)"
}
