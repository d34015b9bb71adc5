package cli

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/bustype"
)

func (a *app) dlqCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, retry and purge dead letters (jobs that used up their attempts)",
		Long: `A pool job that fails every attempt is discarded by River and kept by riverbus
as a dead letter until an operator retries or purges it, whatever River's
cleaner does. Retrying puts the job back to work; --all replays a pool's dead
letters in sequence order. A retry from River UI (River's JobRetry) ends a dead
letter too; deleting its job there, as River's cleaner does, does not.`,
	}
	cmd.AddCommand(a.dlqListCommand(), a.dlqShowCommand(), a.dlqActionCommand("retry"), a.dlqActionCommand("purge"))
	return cmd
}

func (a *app) dlqListCommand() *cobra.Command {
	var (
		pool   string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List dead letters, oldest first",
		Example: "  riverbus dlq list\n  riverbus dlq list --pool billing --json",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if pool != "" {
				if _, err := client.PoolGet(cmd.Context(), pool); err != nil {
					return err
				}
			}
			dls, err := client.DeadLetterList(cmd.Context(), bustype.DeadLetterListParams{Pool: pool, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, dls)
			}
			if len(dls) == 0 {
				fmt.Fprintln(a.stdout, "no dead letters")
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "JOB\tPOOL\tSEQUENCE\tTYPE\tKEY\tATTEMPTS\tDISCARDED\tLAST ERROR")
			for _, d := range dls {
				fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\n", d.JobID, safe(d.Pool), d.GlobalSequence, safe(d.EventType), safe(d.EventKey),
					d.Attempt, d.MaxAttempts, d.DiscardedAt.Format(time.DateTime), truncate(d.LastError, 60))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "only this pool's dead letters")
	cmd.Flags().IntVar(&limit, "limit", 100, "most dead letters to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) dlqShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "show JOB_ID",
		Short:   "Show one dead letter with its event and every attempt's error",
		Example: "  riverbus dlq show 4211",
		Args:    exactArgs(1, "a job id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return &usageError{cmd: cmd, err: fmt.Errorf("job id must be a number, got %q", args[0])}
			}
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			dl, err := client.DeadLetterGet(cmd.Context(), id)
			if errors.Is(err, bustype.ErrDeadLetterNotFound) {
				return fmt.Errorf("%w: no dead letter with job id %d (riverbus dlq list lists them)", bustype.ErrDeadLetterNotFound, id)
			}
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, dl)
		},
	}
}

func (a *app) dlqActionCommand(verb string) *cobra.Command {
	var (
		pool string
		all  bool
	)
	short := "Put dead letters back to work: one by job id, or all of a pool in sequence order"
	if verb == "purge" {
		short = "Delete dead letters for good: one by job id, or all of a pool"
	}
	cmd := &cobra.Command{
		Use:     verb + " [JOB_ID | --pool POOL --all]",
		Short:   short,
		Example: fmt.Sprintf("  riverbus dlq %s 4211\n  riverbus dlq %s --pool billing --all", verb, verb),
		RunE: func(cmd *cobra.Command, args []string) error {
			var id int64
			switch {
			case len(args) == 1 && !all && pool == "":
				var err error
				if id, err = strconv.ParseInt(args[0], 10, 64); err != nil {
					return &usageError{cmd: cmd, err: fmt.Errorf("job id must be a number, got %q", args[0])}
				}
			case len(args) == 0 && all && pool != "":
			default:
				return &usageError{cmd: cmd, err: fmt.Errorf("give either one JOB_ID or --pool POOL --all")}
			}
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			if all {
				if _, err := client.PoolGet(ctx, pool); err != nil {
					return err
				}
			}
			switch {
			case verb == "retry" && all:
				res, err := client.DeadLetterRetryPool(ctx, pool)
				if err != nil {
					return err
				}
				var stay []bustype.DeadLetterRetryResult
				for _, r := range res {
					if r.Action == bustype.RetryUndeliverable {
						stay = append(stay, r)
					}
				}
				fmt.Fprintf(a.stdout, "retried %d dead letter(s) of pool %s in sequence order\n", len(res)-len(stay), pool)
				for _, r := range stay {
					fmt.Fprintf(a.stdout, "dead letter %d left: event still cannot become a job: %s\n", r.DeadJobID, truncate(r.Reason, 200))
				}
			case verb == "retry":
				res, err := client.DeadLetterRetry(ctx, id)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "dead letter %d retried as job %d (%s)\n", res.DeadJobID, res.JobID, res.Action)
			case all:
				n, err := client.DeadLetterPurgePool(ctx, pool)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "purged %d dead letter(s) of pool %s\n", n, pool)
			default:
				if err := client.DeadLetterPurge(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "purged dead letter %d\n", id)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "the pool, with --all")
	cmd.Flags().BoolVar(&all, "all", false, "every dead letter of --pool")
	return cmd
}
