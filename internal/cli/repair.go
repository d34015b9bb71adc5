package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) repairCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Repair riverbus's own rows after an operator mistake",
	}
	cmd.AddCommand(a.repairHorizonCommand())
	return cmd
}

func (a *app) repairHorizonCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "horizon",
		Short: "Recreate a missing riverbus_horizon row at a value that skips nothing",
		Long: `Without its riverbus_horizon row the horizon cannot move and no pool is
fanned out: every pass fails with an error naming this command. repair
horizon recreates the row at a value that cannot skip an event (the highest
sequence the horizon is known to have passed, or the lowest pool cursor
below any open gap; see Client.HorizonRepair) and leaves an existing row
alone. The horizon then walks up again from there. It is safe while riverbus
runs; run it as the schema owner (the worker role may not insert the row).`,
		Example: `  riverbus repair horizon`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := client.HorizonRepair(cmd.Context())
			if err != nil {
				return err
			}
			if res.Created {
				fmt.Fprintf(a.stdout, "recreated riverbus_horizon at %d; the horizon walks up from there\n", res.Horizon)
			} else {
				fmt.Fprintf(a.stdout, "riverbus_horizon is present (horizon %d): nothing to repair\n", res.Horizon)
			}
			return nil
		},
	}
}
