package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/migrations"
)

func (a *app) migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the riverbus and River schema",
		Long: `Applies River's migrations and riverbus's, under a lock only the owner can
take, so several processes may run it at once. Running it again changes
nothing. A lock wait that runs out fails naming the session that held it.`,
		Example: `  DATABASE_URL=postgres://localhost/app riverbus migrate`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := a.connectUnmigrated(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := migrations.UpWithOpts(cmd.Context(), db, &migrations.UpOpts{Logger: a.logger})
			if err != nil {
				return err
			}
			v, err := migrations.Version(cmd.Context(), db)
			if err != nil {
				return err
			}
			if tooNew := migrations.AsSchemaTooNew(migrations.Check(cmd.Context(), db, migrations.Newest())); tooNew != nil {
				fmt.Fprintf(a.stdout, "schema version %d is newer than this build knows (%d): nothing to apply; this build's processes do not run against it (exit code %d)\n",
					tooNew.Schema, tooNew.Code, exitSchemaTooNew)
				return nil
			}
			if len(res.River) == 0 && len(res.Riverbus) == 0 {
				fmt.Fprintf(a.stdout, "schema is up to date (riverbus version %d)\n", v)
				return nil
			}
			fmt.Fprintf(a.stdout, "applied River migrations %v and riverbus migrations %v; riverbus schema version %d\n",
				res.River, res.Riverbus, v)
			return nil
		},
	}
}
