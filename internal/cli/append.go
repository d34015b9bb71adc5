package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/outbox"
)

func (a *app) appendCommand() *cobra.Command {
	var (
		typ, key, data, metadata string
		tags                     []string
		version                  int
	)
	cmd := &cobra.Command{
		Use:   "append --type TYPE --data JSON",
		Short: "Append one event (for scripts and debugging)",
		Example: `  riverbus append --type invoice.created --key customer-7 --tag region=eu --data '{"invoice":"INV-1","cents":1200}'
  riverbus append --type invoice.created --version 2 --data '{"invoice":"INV-2","amount":{"cents":900}}'`,
		Args: exactArgs(0, "no arguments (use flags)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if version < 1 || version > outbox.VersionMax {
				return &usageError{cmd: cmd, err: fmt.Errorf("--version must be between 1 and %d, got %d", outbox.VersionMax, version)}
			}
			ev := outbox.Event{Type: typ, Key: key, Tags: tags, Data: json.RawMessage(data), Version: version}
			if metadata != "" {
				ev.Metadata = json.RawMessage(metadata)
			}
			db, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer db.Close()
			res, err := outbox.Append(cmd.Context(), db, ev)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "appended event %s at sequence %d\n", res[0].EventID, res[0].GlobalSequence)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&typ, "type", "", "event type (required)")
	f.StringVar(&key, "key", "", "ordering key: stream, aggregate or tenant id")
	f.StringArrayVar(&tags, "tag", nil, "name=value tag (repeatable)")
	f.StringVar(&data, "data", "", "event data, JSON (required)")
	f.StringVar(&metadata, "metadata", "", "event metadata, a JSON object")
	f.IntVar(&version, "version", 1, fmt.Sprintf("version of the event type's data, 1 to %d (docs/evolving-events.md)", outbox.VersionMax))
	_ = cmd.MarkFlagRequired("type")
	_ = cmd.MarkFlagRequired("data")
	return cmd
}
