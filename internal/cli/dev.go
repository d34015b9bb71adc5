package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/migrations"
)

func (a *app) devCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Start a throwaway, migrated PostgreSQL that lives until Ctrl-C",
		Long: `Starts a local PostgreSQL in a temporary directory (as the postgres user when
run as root), migrates it, prints its URL and waits. Ctrl-C stops it and
removes every file.`,
		Example: `  riverbus dev
  # in another shell:
  export DATABASE_URL=postgres://...   # the URL it printed
  riverbus pool create billing --types invoice.created`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, dbURL, err := a.startThrowaway(cmd.Context())
			if err != nil {
				return err
			}
			defer srv.Stop() //nolint:errcheck
			fmt.Fprintf(a.stdout, "throwaway PostgreSQL is ready:\n\n  export DATABASE_URL='%s'\n\nCtrl-C stops it and removes its data.\n", dbURL)
			<-cmd.Context().Done()
			fmt.Fprintln(a.stdout, "stopping the throwaway PostgreSQL")
			return nil
		},
	}
}

// startThrowaway starts a throwaway server and migrates its database.
func (a *app) startThrowaway(ctx context.Context) (*pgserver.Server, string, error) {
	srv, err := pgserver.Start(ctx, pgserver.Opts{Logf: func(format string, args ...any) {
		a.logger.Info(fmt.Sprintf(format, args...))
	}})
	if err != nil {
		return nil, "", err
	}
	dbURL := srv.URL("postgres")
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		_ = srv.Stop()
		return nil, "", err
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		_ = srv.Stop()
		return nil, "", err
	}
	return srv, dbURL, nil
}
