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
	cmd.AddCommand(a.repairHorizonCommand(), a.repairSequenceCommand())
	return cmd
}

func (a *app) repairSequenceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "sequence",
		Short: "Renumber events numbered above the sequence (problem event_above_sequence)",
		Long: `An event numbered above riverbus_event_global_sequence's last value did not
get its number from the assign trigger (it was inserted with the trigger
disabled or in replica mode, or, before migration 017, through a temporary
sequence of the same name). The horizon stops below it and status reports
event_above_sequence; the sequence would hand out its number again.
repair sequence gives each such event the sequence's next number, lowest
first, and changes nothing else of it: the pools then receive it once, at
its new number, and the sequence goes on from where it was, however high
the planted number. It is refused while the sequence is below the horizon
(fix sequence_below_horizon first). It is safe while riverbus runs; run it
as the schema owner (only the owner may update riverbus_event).`,
		Example: `  riverbus repair sequence`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			moved, err := client.SequenceRepair(cmd.Context())
			if err != nil {
				return err
			}
			if len(moved) == 0 {
				fmt.Fprintln(a.stdout, "no event is numbered above the sequence: nothing to repair")
				return nil
			}
			for _, m := range moved {
				fmt.Fprintf(a.stdout, "event %d is now %d\n", m.Old, m.New)
			}
			fmt.Fprintf(a.stdout, "renumbered %d event(s); the pools receive them at their new numbers\n", len(moved))
			return nil
		},
	}
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
