package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
)

func (a *app) retentionCommand() *cobra.Command {
	var (
		apply      bool
		keep       time.Duration
		batchSize  int
		maxBatches int
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Show what event retention would delete now (dry run); --apply deletes it",
		Long: `Event retention deletes old events from riverbus_event under the policy set
with "riverbus retention set": events older than its keep period (or, with
--until-consumed, as soon as possible), and never one that a pool (paused
ones too), the horizon, a late event or an undeliverable dead letter still
needs, nor part of a transaction whose other events stay.

Without flags it is a dry run: the events it would delete (count, sequence
range, oldest and newest), the floor and which pool or rule holds it, the
policy and River's job retention settings. --keep previews another keep
period. --apply deletes, in batches of --batch-size events, each a
transaction of its own, printing progress; Ctrl-C stops between batches and
loses nothing, and the next run resumes there. riverbus run and riverbus
fanout apply the policy on their own every RIVERBUS_RETENTION_INTERVAL.`,
		Example: `  riverbus retention                    # dry run under the policy
  riverbus retention --keep 168h        # what a 7-day policy would delete
  riverbus retention --apply            # delete now, in batches`,
		Args: exactArgs(0, "no arguments (see retention set / show)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if apply && cmd.Flags().Changed("keep") {
				return &usageError{cmd: cmd, err: errors.New("--apply follows the stored policy; set it with riverbus retention set --keep, or preview with --keep alone")}
			}
			if keep < 0 {
				return &usageError{cmd: cmd, err: fmt.Errorf("--keep must not be negative, got %s", keep)}
			}
			if batchSize < 1 || batchSize > 100_000 {
				return &usageError{cmd: cmd, err: fmt.Errorf("--batch-size must be between 1 and 100000, got %d", batchSize)}
			}
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			opts := &riverbus.RetentionOpts{BatchSize: batchSize, MaxBatches: maxBatches}
			if cmd.Flags().Changed("keep") {
				opts.Keep = &keep
			}
			var plan *bustype.RetentionPlan
			if apply {
				last := time.Now()
				opts.Progress = func(p bustype.RetentionPlan) {
					if time.Since(last) >= time.Second && !asJSON {
						last = time.Now()
						fmt.Fprintf(a.stdout, "deleted %d events through sequence %d (%d batches)\n", p.Events, p.Through, p.Batches)
					}
				}
				plan, err = client.RetentionTrim(cmd.Context(), opts)
				if plan != nil && cmd.Context().Err() != nil {
					fmt.Fprintf(a.stdout, "interrupted: deleted %d events through sequence %d; run again to resume\n", plan.Events, plan.Through)
					return nil
				}
			} else {
				plan, err = client.RetentionPlan(cmd.Context(), opts)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, retentionJSON{Plan: plan, River: a.riverRetention()})
			}
			a.printRetention(a.stdout, plan)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&apply, "apply", false, "delete the events (default: a dry run that deletes nothing)")
	f.DurationVar(&keep, "keep", 0, "dry run only: preview this keep period instead of the policy's (0: until consumed)")
	f.IntVar(&batchSize, "batch-size", 5000, "events read, and with --apply deleted, per transaction")
	f.IntVar(&maxBatches, "max-batches", 0, "stop after this many batches (0: no limit)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	a.jobRetentionFlags(cmd)
	cmd.AddCommand(a.retentionSetCommand(), a.retentionShowCommand())
	return cmd
}

func (a *app) retentionSetCommand() *cobra.Command {
	var (
		keep          time.Duration
		untilConsumed bool
		off           bool
	)
	cmd := &cobra.Command{
		Use:   "set (--keep DURATION | --until-consumed | --off)",
		Short: "Set the event retention policy (as the schema owner)",
		Long: `--keep 720h keeps every event for 30 days after it was appended (by the
database's clock, whatever its occurred_at says), and after that until every
pool has passed it. --until-consumed deletes events as soon as
every pool has passed them. --off deletes nothing (the default). Check what
a policy would delete first with "riverbus retention --keep DURATION".`,
		Example: `  riverbus retention set --keep 720h
  riverbus retention set --until-consumed
  riverbus retention set --off`,
		Args: exactArgs(0, "no arguments (use flags)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, set := range []bool{cmd.Flags().Changed("keep"), untilConsumed, off} {
				if set {
					n++
				}
			}
			if n != 1 {
				return &usageError{cmd: cmd, err: errors.New("give exactly one of --keep, --until-consumed and --off")}
			}
			if cmd.Flags().Changed("keep") && keep <= 0 {
				return &usageError{cmd: cmd, err: fmt.Errorf("--keep must be positive (or use --until-consumed), got %s", keep)}
			}
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			p, err := client.RetentionSet(cmd.Context(), !off, keep)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "retention policy: %s\n", describePolicy(p))
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&keep, "keep", 0, "keep events this long after they were appended (e.g. 720h), then until consumed")
	f.BoolVar(&untilConsumed, "until-consumed", false, "delete events once every pool has passed them")
	f.BoolVar(&off, "off", false, "delete nothing")
	return cmd
}

func (a *app) retentionShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the retention policy, where the log begins, and River's job retention",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			p, err := client.RetentionPolicy(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, retentionJSON{Policy: &p, River: a.riverRetention()})
			}
			a.printPolicy(a.stdout, p)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	a.jobRetentionFlags(cmd)
	return cmd
}

// retentionJSON is what --json prints.
type retentionJSON struct {
	Policy *bustype.RetentionPolicy `json:"policy,omitempty"`
	Plan   *bustype.RetentionPlan   `json:"plan,omitempty"`
	River  riverRetention           `json:"river_job_retention"`
}

// riverRetention is River's job retention as this process's workers use
// it (RIVERBUS_*_JOB_RETENTION): a duration, or "forever".
type riverRetention struct {
	Completed string `json:"completed"`
	Cancelled string `json:"cancelled"`
	Discarded string `json:"discarded"`
}

func (a *app) riverRetention() riverRetention {
	d := func(v time.Duration) string {
		if v == 0 {
			return "forever"
		}
		return v.String()
	}
	return riverRetention{Completed: d(a.cfg.CompletedJobRetention), Cancelled: d(a.cfg.CancelledJobRetention), Discarded: d(a.cfg.DiscardedJobRetention)}
}

func describePolicy(p bustype.RetentionPolicy) string {
	switch {
	case !p.Enabled:
		return "off (nothing is deleted)"
	case p.Keep == 0:
		return "until consumed (deleted once every pool has passed them)"
	}
	return fmt.Sprintf("keep %s, then until consumed", p.Keep)
}

func (a *app) printPolicy(w io.Writer, p bustype.RetentionPolicy) {
	fmt.Fprintf(w, "policy:           %s\n", describePolicy(p))
	if p.TrimmedThrough > 0 {
		fmt.Fprintf(w, "log begins after: %d (--from beginning and reset --to 0 start there)\n", p.TrimmedThrough)
	} else {
		fmt.Fprintln(w, "log begins after: 0 (nothing deleted yet)")
	}
	last := "never"
	if p.LastTrimmedAt != nil {
		last = p.LastTrimmedAt.Format(time.DateTime)
	}
	fmt.Fprintf(w, "events deleted:   %d in all, last at %s\n", p.EventsTrimmed, last)
	r := a.riverRetention()
	fmt.Fprintf(w, "River job retention (this process's workers): completed %s, cancelled %s, discarded %s\n", r.Completed, r.Cancelled, r.Discarded)
}

func (a *app) printRetention(w io.Writer, p *bustype.RetentionPlan) {
	verb := "would delete"
	if p.Applied {
		verb = "deleted"
	}
	if p.Events == 0 {
		fmt.Fprintf(w, "%s nothing", verb)
	} else {
		fmt.Fprintf(w, "%s %d events, sequences %d-%d", verb, p.Events, p.From+1, p.Through)
		if p.Oldest != nil && p.Newest != nil {
			fmt.Fprintf(w, ", appended %s to %s", p.Oldest.Format(time.DateTime), p.Newest.Format(time.DateTime))
		}
	}
	fmt.Fprintf(w, " (%d batches)\n", p.Batches)
	fmt.Fprintf(w, "stopped by:       %s\n", describeStop(p))
	fmt.Fprintf(w, "floor:            %d\n", p.Floor)
	for i, h := range p.Holds {
		if i == 5 {
			fmt.Fprintf(w, "                  ... %d more\n", len(p.Holds)-i)
			break
		}
		fmt.Fprintf(w, "  held by %-12s %-30s keeps events above %d\n", h.Rule, safe(h.Holder), h.Floor)
	}
	a.printPolicy(w, p.Policy)
}

func describeStop(p *bustype.RetentionPlan) string {
	switch p.StoppedBy {
	case bustype.RetentionStopFloor:
		if h := p.HeldBy(); h != nil {
			return fmt.Sprintf("the floor, held by %s %s", h.Rule, safe(h.Holder))
		}
		return "the floor"
	case bustype.RetentionStopKeep:
		return "the keep period: the next event is younger"
	case bustype.RetentionStopTransaction:
		return "a transaction with events above the floor (deleted whole or not at all)"
	case bustype.RetentionStopBatch:
		return "--max-batches; run again to go on"
	case bustype.RetentionStopDisabled:
		return "no policy set (riverbus retention set)"
	}
	return string(p.StoppedBy)
}
