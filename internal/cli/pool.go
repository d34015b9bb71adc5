package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
)

func (a *app) poolCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Create, inspect and steer consumer pools",
		Long: `A pool is a named consumer group: every event that matches its filter becomes
one River job whose kind is the pool name. Worker processes that work that kind
share the pool's work.`,
	}
	cmd.AddCommand(a.poolCreateCommand(false), a.poolCreateCommand(true), a.poolListCommand(), a.poolShowCommand(),
		a.poolStatusCommand("pause", bustype.PoolPaused), a.poolStatusCommand("resume", bustype.PoolActive),
		a.poolResetCommand(), a.poolDeleteCommand())
	return cmd
}

func (a *app) poolCreateCommand(update bool) *cobra.Command {
	var (
		types, tags, queue, from string
		ordering, onDead, group  string
		maxAttempts, priority    int
		allowUpdate              bool
		retry                    bustype.RetrySchedule
	)
	use, short := "create NAME", "Create a pool (a no-op when it exists with the same settings)"
	example := `  riverbus pool create billing --types invoice.created,invoice.paid --max-attempts 10
  riverbus pool create eu-audit --tags region=eu --from now
  riverbus pool create rebuild --from 0
  riverbus pool create accounts --ordering key --on-dead-letter block
  riverbus pool create ledger --group transaction
  riverbus pool create hooks --retry-base 1s --retry-factor 2 --retry-max-delay 3m --retry-jitter 0.1`
	if update {
		use, short = "update NAME", "Change a pool's queue, filters, attempts, priority or retry schedule"
		example = `  riverbus pool update billing --types invoice.created --max-attempts 5
  riverbus pool update hooks --retry-max-delay 10m --retry-jitter 0`
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    exactArgs(1, "a pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, err := bustype.ParseStartPosition(from)
			if err != nil {
				return &usageError{cmd: cmd, err: fmt.Errorf("--from: %w", err)}
			}
			if err := retryFlags(&retry, cmd.Flags().Changed); err != nil {
				return &usageError{cmd: cmd, err: err}
			}
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			params := bustype.PoolParams{
				Name: args[0], Queue: queue, EventTypes: splitList(types), Tags: splitList(tags),
				MaxAttempts: maxAttempts, Priority: priority, From: pos,
				Ordering: bustype.Ordering(ordering), OnDeadLetter: bustype.DeadLetterPolicy(onDead), Grouping: bustype.Grouping(group),
				Retry: retry,
			}
			var (
				p       *bustype.Pool
				created bool
			)
			if update || allowUpdate {
				// Only the flags given change: the others keep the pool's
				// current values. `create --update` of a pool that does not
				// exist yet creates it with the defaults.
				p, err = client.PoolUpdate(cmd.Context(), args[0], updateParams(params, cmd.Flags().Changed))
				if errors.Is(err, bustype.ErrUnknownPool) && allowUpdate {
					p, created, err = client.PoolCreate(cmd.Context(), params)
				}
			} else {
				p, created, err = client.PoolCreate(cmd.Context(), params)
			}
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("types") {
				a.warnAbsentTypes(cmd.Context(), client, params.EventTypes)
			}
			switch {
			case created:
				fmt.Fprintf(a.stdout, "created pool %s (queue %s, starts after sequence %d)\n", p.Name, p.Queue, p.StartAfter)
			case update || allowUpdate:
				fmt.Fprintf(a.stdout, "pool %s: queue=%s types=%s tags=%s max_attempts=%d priority=%d ordering=%s on_dead_letter=%s group=%s retry: %s\n",
					p.Name, p.Queue, listOrAll(p.EventTypes), listOrAll(p.Tags), p.MaxAttempts, p.Priority, p.Ordering, p.OnDeadLetter, p.Grouping, p.Retry)
			default:
				fmt.Fprintf(a.stdout, "pool %s exists with these settings; nothing to do\n", p.Name)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&types, "types", "", "comma-separated event types to deliver (default: all)")
	f.StringVar(&tags, "tags", "", "comma-separated name=value tags an event must all carry")
	f.StringVar(&queue, "queue", "", "River queue of the pool's jobs (default: derived from the name)")
	f.IntVar(&maxAttempts, "max-attempts", 0, fmt.Sprintf("attempts per job before it becomes a dead letter (default %d)", bustype.MaxAttemptsDefault))
	f.IntVar(&priority, "priority", 0, "River priority of the pool's jobs, 1 (highest) to 4 (default 1)")
	f.StringVar(&ordering, "ordering", "", "none (default), key (one job per event key at a time, in sequence order), or global (one job at a time)")
	f.StringVar(&onDead, "on-dead-letter", "", "in an ordered pool, what a dead letter does to its key: release (default: the key goes on) or block (the key waits for dlq retry or purge)")
	f.StringVar(&group, "group", "", "none (default: one job per event) or transaction (one job per appending transaction, with all its events)")
	f.DurationVar(&retry.Base, "retry-base", 0, fmt.Sprintf("delay before a failed job's first retry; each later one is --retry-factor times longer (default %s)", bustype.RetryBaseDefault))
	f.Float64Var(&retry.Factor, "retry-factor", 0, fmt.Sprintf("how much longer each retry's delay is than the one before, 1 (fixed) to %g (default %g)", bustype.RetryFactorMax, bustype.RetryFactorDefault))
	f.DurationVar(&retry.MaxDelay, "retry-max-delay", 0, fmt.Sprintf("longest delay before a retry, a webhook's Retry-After included, at most %s (default %s)", bustype.RetryMaxDelayMax, bustype.RetryMaxDelayDefault))
	f.Float64Var(&retry.Jitter, "retry-jitter", 0, fmt.Sprintf("largest random fraction a delay is shortened by, 0 (none) to 1 (default %g)", bustype.RetryJitterDefault))
	if !update {
		f.StringVar(&from, "from", "beginning", "where a new pool starts: beginning (the oldest event retention kept), now, or a sequence number (delivers events after it; at most the last sequence handed out)")
		f.BoolVar(&allowUpdate, "update", false, "change the settings of an existing pool instead of failing")
	}
	return cmd
}

// updateParams are the settings of params whose flag was given (changed
// reports which were), so an update changes only what it names.
func updateParams(params bustype.PoolParams, changed func(flag string) bool) riverbus.PoolUpdateParams {
	var u riverbus.PoolUpdateParams
	if changed("queue") {
		u.Queue = params.Queue
	}
	if changed("types") {
		u.EventTypes = &params.EventTypes
	}
	if changed("tags") {
		u.Tags = &params.Tags
	}
	if changed("max-attempts") {
		u.MaxAttempts = params.MaxAttempts
	}
	if changed("priority") {
		u.Priority = params.Priority
	}
	if changed("ordering") {
		u.Ordering = params.Ordering
	}
	if changed("on-dead-letter") {
		u.OnDeadLetter = params.OnDeadLetter
	}
	if changed("group") {
		u.Grouping = params.Grouping
	}
	// retryFlags made the flags' values what PoolUpdateParams expects (an
	// unchanged flag is zero, which keeps the pool's value).
	u.Retry = params.Retry
	return u
}

// retryFlags checks the --retry-* flags given and turns an explicit
// --retry-jitter 0 into -1, PoolParams' "no jitter" (its zero is the
// default). Out-of-range values are left to the pool's validation, which
// names them; a zero delay or factor given explicitly is refused here, as
// it would silently mean the default.
func retryFlags(r *bustype.RetrySchedule, changed func(flag string) bool) error {
	switch {
	case changed("retry-base") && r.Base <= 0:
		return fmt.Errorf("--retry-base must be at least %s, got %s", bustype.RetryDelayMin, r.Base)
	case changed("retry-factor") && r.Factor <= 0:
		return fmt.Errorf("--retry-factor must be between 1 and %g, got %g", bustype.RetryFactorMax, r.Factor)
	case changed("retry-max-delay") && r.MaxDelay <= 0:
		return fmt.Errorf("--retry-max-delay must be positive, got %s", r.MaxDelay)
	case changed("retry-jitter") && r.Jitter < 0:
		return fmt.Errorf("--retry-jitter must be between 0 and 1, got %g", r.Jitter)
	case changed("retry-jitter") && r.Jitter == 0:
		r.Jitter = -1
	}
	return nil
}

// retryLabel is a pool's retry schedule in a table cell: "1s x2 max 3m0s
// jitter 0.1".
func retryLabel(s bustype.RetrySchedule) string {
	return fmt.Sprintf("%s x%g max %s jitter %g", s.Base, s.Factor, s.MaxDelay, s.Jitter)
}

func listOrAll(s []string) string {
	if len(s) == 0 {
		return "(all)"
	}
	return safeList(s)
}

func (a *app) poolListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List pools with their cursor, checkpoint and filters",
		Example: `  riverbus pool list
  riverbus pool list --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			pools, err := client.PoolList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, pools)
			}
			if len(pools) == 0 {
				fmt.Fprintln(a.stdout, "no pools yet: create one with `riverbus pool create NAME`")
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "POOL\tSTATUS\tQUEUE\tORDERING\tGROUP\tCURSOR\tCHECKPOINT\tTYPES\tTAGS\tMAX ATTEMPTS\tRETRY")
			for _, p := range pools {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", p.Name, p.Status, p.Queue, orderingLabel(p), p.Grouping,
					p.Cursor, p.Checkpoint, listOrAll(p.EventTypes), listOrAll(p.Tags), p.MaxAttempts, retryLabel(p.Retry))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) poolShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "show NAME",
		Short:   "Show one pool",
		Example: `  riverbus pool show billing`,
		Args:    exactArgs(1, "a pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			p, err := client.PoolGet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, p)
		},
	}
}

func (a *app) poolStatusCommand(verb string, status bustype.PoolStatus) *cobra.Command {
	short := "Pause a pool's fan-out and handlers; nothing is lost, resume continues where it stopped"
	if status == bustype.PoolActive {
		short = "Resume a paused pool's fan-out and handlers"
	}
	return &cobra.Command{
		Use:     verb + " NAME",
		Short:   short,
		Example: "  riverbus pool " + verb + " billing",
		Args:    exactArgs(1, "a pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			change := client.PoolResume
			if status == bustype.PoolPaused {
				change = client.PoolPause
			}
			res, err := change(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			p, shared := res.Pool, res.QueueShared
			fmt.Fprintf(a.stdout, "pool %s is %s (cursor %d)\n", p.Name, p.Status, p.Cursor)
			if shared {
				fmt.Fprintf(a.stdout, "note: River queue %s is shared with other pools, so only the fan-out changed; its workers go on\n", p.Queue)
			} else if status == bustype.PoolPaused {
				fmt.Fprintf(a.stdout, "River queue %s paused too: workers finish the jobs they hold and fetch no more\n", p.Queue)
			}
			return nil
		},
	}
}

// exitReplayDeadLetters is the exit code of `pool reset --wait` when
// replayed events became dead letters: the reset is done, so a script must
// not run it again as it might after a failure (1).
const exitReplayDeadLetters = 3

func (a *app) poolResetCommand() *cobra.Command {
	var (
		to, toTime string
		wait       bool
	)
	cmd := &cobra.Command{
		Use:   "reset NAME (--to SEQ | --to-time TIME)",
		Short: "Fan a pool's history out again from a position or a time (rebuild a projection)",
		Long: `Moves the pool's cursor back so that every event after SEQ becomes a job again.
--to 0 re-delivers the whole log (what event retention kept of it; a SEQ
below where the log begins is refused). A SEQ beyond the end of the log (the
last sequence handed out) is refused too: the pool would skip the events
appended next. Jobs already created are left alone.

--to-time TIME (RFC 3339 with its offset: 2026-11-20T10:00:00Z,
2026-11-20T11:00:00+01:00) re-delivers every event committed after TIME, by
the database's clock, including the events of a transaction that began
before TIME and committed after it; an event's occurred_at plays no part.
The position comes from the horizon's record of when events committed,
taken every few seconds, so the events committed in the few seconds before
TIME are delivered again too. A TIME after the database's clock, before the
first event the log keeps, or before riverbus began recording commits (the
upgrade to schema version 24) is refused with where the log begins and
ends. --to and --to-time are mutually exclusive.

Each event replayed is a new job: a handler that refuses an event it has
applied before (workers.RunExactlyOnce guards one job, not one event) turns
the replay into dead letters. --wait waits until every replayed event is
finished, then lists the dead letters the replay made.

Exit status: 0 reset (and with --wait, replayed without a dead letter);
1 the reset or the wait failed; 2 bad input, such as a SEQ beyond the end of
the log or a TIME the log cannot answer; 3 with --wait, replayed events
became dead letters (listed; see riverbus dlq list --pool NAME).`,
		Example: `  riverbus pool reset projections --to 0 --wait
  riverbus pool reset projections --to-time 2026-11-20T10:00:00Z --wait`,
		Args: exactArgs(1, "a pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			byTime := cmd.Flags().Changed("to-time")
			var (
				seq int64
				at  time.Time
				err error
			)
			switch {
			case byTime && cmd.Flags().Changed("to"):
				return &usageError{cmd: cmd, err: errors.New("--to and --to-time are mutually exclusive: give one")}
			case byTime:
				if at, err = time.Parse(time.RFC3339, toTime); err != nil {
					return &usageError{cmd: cmd, err: fmt.Errorf(
						"--to-time must be an RFC 3339 time with its offset, such as 2026-11-20T10:00:00Z or 2026-11-20T11:00:00+01:00, got %q", toTime)}
				}
			case !cmd.Flags().Changed("to"):
				return &usageError{cmd: cmd, err: errors.New("give --to SEQ (a sequence) or --to-time TIME (a time)")}
			default:
				if seq, err = strconv.ParseInt(to, 10, 64); err != nil || seq < 0 {
					return &usageError{cmd: cmd, err: fmt.Errorf("--to must be a sequence number >= 0, got %q", to)}
				}
			}
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var replay *riverbus.PoolReplay
			if byTime {
				replay, err = client.PoolReplayStartToTime(cmd.Context(), args[0], at)
			} else {
				replay, err = client.PoolReplayStart(cmd.Context(), args[0], seq)
			}
			if err != nil {
				return err
			}
			if byTime {
				fmt.Fprintf(a.stdout, "pool %s reset to %s: events after %d will be fanned out again: every event committed after that time, "+
					"and any committed in the %s before it (the horizon recorded %d as committed at %s; times in UTC)\n",
					replay.Pool.Name, at.UTC().Format(bustype.RewindTimeFormat), replay.Pool.Cursor, max(at.Sub(replay.MarkAt), 0).Round(time.Millisecond),
					replay.After, replay.MarkAt.UTC().Format(bustype.RewindTimeFormat))
			} else {
				fmt.Fprintf(a.stdout, "pool %s reset: events after %d will be fanned out again\n", replay.Pool.Name, replay.Pool.Cursor)
			}
			if wait {
				return a.waitReplay(cmd.Context(), client, replay)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "sequence to restart after (0: the beginning)")
	cmd.Flags().StringVar(&toTime, "to-time", "", "time to restart from, RFC 3339 with its offset (2026-11-20T10:00:00Z): every event committed after it is delivered again")
	cmd.Flags().BoolVar(&wait, "wait", false, "show a progress bar until every replayed event is finished, then list the dead letters the replay made (exit 3 if any; needs a fan-out and workers running)")
	return cmd
}

func (a *app) poolDeleteCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a pool (refused while it has unfinished jobs, unless --force)",
		Example: `  riverbus pool delete old-pool`,
		Args:    exactArgs(1, "a pool name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, done, err := a.operator(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if err := client.PoolDelete(cmd.Context(), args[0], &riverbus.PoolDeleteOpts{Force: force}); err != nil {
				if errors.Is(err, bustype.ErrPoolBusy) {
					return fmt.Errorf("%w (pass --force to delete it with its waiting jobs and dead letters)", err)
				}
				return err
			}
			fmt.Fprintf(a.stdout, "deleted pool %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "also delete its waiting jobs and dead letters")
	return cmd
}

func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// orderingLabel is the ordering with its dead-letter policy when it
// matters: "key/block".
func orderingLabel(p *bustype.Pool) string {
	if p.Ordering == bustype.OrderingNone {
		return string(p.Ordering)
	}
	return string(p.Ordering) + "/" + string(p.OnDeadLetter)
}

// waitReplay draws the replay's progress until every event up to the
// horizon at the reset is finished, or ctx ends, and reports the dead
// letters it made: they end the command with exitReplayDeadLetters.
func (a *app) waitReplay(ctx context.Context, client *riverbus.Client, replay *riverbus.PoolReplay) error {
	started := time.Now()
	var first *riverbus.PoolReplayResult
	res, err := client.PoolReplayWait(ctx, replay, &riverbus.PoolReplayWaitOpts{
		PollInterval: time.Second,
		ProgressFunc: func(r riverbus.PoolReplayResult) {
			if first == nil {
				first = &r
			}
			perMinute := int64(0)
			if elapsed := time.Since(started); elapsed >= time.Second {
				perMinute = int64(float64(r.Checkpoint-first.Checkpoint) / elapsed.Minutes())
			}
			line := progressBar(r.Checkpoint-r.After, r.Through-r.After, perMinute)
			if r.DeadLetterCount > 0 {
				line += fmt.Sprintf("  dead letters %d", r.DeadLetterCount)
			}
			fmt.Fprintf(a.stdout, "\r%s\033[K", line)
		},
	})
	switch {
	case res != nil && res.DeadLetterCount > 0:
		// Also when ctx ended first (Ctrl-C): the dead letters so far.
		return a.replayDeadLetters(res)
	case ctx.Err() != nil:
		fmt.Fprintln(a.stdout)
		return nil
	case err != nil:
		return err
	}
	fmt.Fprintf(a.stdout, "\rpool %s caught up: checkpoint %d\033[K\n", res.Pool, res.Checkpoint)
	return nil
}

// replayDeadLetters lists the dead letters a replay made and returns the
// error that exits with exitReplayDeadLetters.
func (a *app) replayDeadLetters(r *riverbus.PoolReplayResult) error {
	state := "replayed"
	if !r.Done() {
		state = "replaying"
	}
	fmt.Fprintf(a.stdout, "\rpool %s %s events after %d through %d: checkpoint %d; %d of the replayed events became dead letters:\033[K\n",
		r.Pool, state, r.After, r.Through, r.Checkpoint, r.DeadLetterCount)
	for _, d := range r.DeadLetters {
		fmt.Fprintf(a.stdout, "  job %d, event %d (%s), attempt %d/%d: %s\n", d.JobID, d.GlobalSequence, safe(d.EventType),
			d.Attempt, d.MaxAttempts, truncate(d.LastError, 200))
	}
	if more := r.DeadLetterCount - int64(len(r.DeadLetters)); more > 0 {
		fmt.Fprintf(a.stdout, "  and %d more\n", more)
	}
	return &exitError{code: exitReplayDeadLetters, err: fmt.Errorf(
		"pool %s: %d replayed event(s) became dead letters: `riverbus dlq list --pool %s` lists them; once the handler takes them, `riverbus dlq retry --pool %s --all`",
		r.Pool, r.DeadLetterCount, r.Pool, r.Pool)}
}

// warnAbsentTypes warns, on stderr, about each of types no event in the log
// has: most likely a typo, and the pool would wait for it forever. The pool
// is made all the same; a failed check is a warning too.
func (a *app) warnAbsentTypes(ctx context.Context, client *riverbus.Client, types []string) {
	absent, err := client.EventTypesAbsent(ctx, types)
	if err != nil {
		fmt.Fprintf(a.stderr, "warning: could not check that events of the types given exist: %s\n", safe(err.Error()))
		return
	}
	for _, typ := range absent {
		fmt.Fprintf(a.stderr, "warning: no event of type %q is in the log yet: check the spelling; the pool receives only the types --types names\n", typ)
	}
}
