package riverbus

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/internal/health"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/redact"
	"github.com/riverbus/riverbus/internal/retention"
)

// StatusCatchingUpLag is the lag, in events, from which Status calls an
// active pool that nothing holds catching up (PoolCatchingUp); `riverbus
// status` draws its progress from there too.
const StatusCatchingUpLag = 1000

// StatusRangesMax is how many open gaps and skipped ranges Status lists
// (the lowest ones); OpenGaps and WatchedSkippedRanges count them all.
const StatusRangesMax = 50

// Status is a snapshot of riverbus in one database, read in one
// transaction: the horizon and its gaps, and per pool how far the fan-out
// and the handlers got. Client.Status returns it; `riverbus status`, the
// Prometheus metrics and the summary line of `riverbus run` show it. Its JSON
// form is the output of `riverbus status --json`.
type Status struct {
	// At is when the snapshot was read, by this process's clock.
	At time.Time `json:"at"`
	// Horizon is the global horizon: every sequence at or below it is
	// visible or will never commit.
	Horizon int64 `json:"horizon"`
	// LastSequence is the last global sequence handed out (0 before the
	// first event). Above the horizon are events in flight and gaps.
	LastSequence int64 `json:"last_sequence"`
	// LastCommitted is the highest global sequence of a committed event
	// (0 when there is none). Above the horizon it is an event no pool
	// can read yet: the horizon waits for a gap below it, or no fan-out
	// is running.
	LastCommitted int64 `json:"last_committed"`
	// HorizonUpdatedAt is when the horizon row last changed: the horizon
	// moved, or a round recorded, proved or skipped a gap.
	// HorizonAgeSeconds is how long ago that was by the database's clock;
	// it grows while nothing is appended as well as when the horizon is
	// stuck (then LastCommitted is above Horizon).
	HorizonUpdatedAt  time.Time `json:"horizon_updated_at"`
	HorizonAgeSeconds float64   `json:"horizon_age_seconds"`
	// OpenGaps counts the runs of missing sequences just above the horizon.
	OpenGaps int64 `json:"open_gaps"`
	// WatchedSkipped counts the sequences the horizon skipped on the gap
	// timeout that are still watched for a late commit;
	// WatchedSkippedRanges counts the runs they form.
	WatchedSkipped       int64 `json:"watched_skipped"`
	WatchedSkippedRanges int64 `json:"watched_skipped_ranges"`
	// GapRanges are the open gaps just above the horizon, and
	// SkippedRanges the skipped ranges still watched, lowest first, at
	// most StatusRangesMax of each; empty (not nil) when there is none.
	GapRanges     []StatusRange `json:"gap_ranges"`
	SkippedRanges []StatusRange `json:"skipped_ranges"`
	// GapsProvenDead, GapsSkipped and LateEvents count, since the schema
	// was created, the missing sequences proven rolled back, those skipped
	// on the gap timeout, and those of them that committed after all.
	GapsProvenDead int64 `json:"gaps_proven_dead_total"`
	GapsSkipped    int64 `json:"gaps_skipped_total"`
	LateEvents     int64 `json:"late_events_total"`
	// LateEventsPending counts the late events that not every pool has
	// handled yet.
	LateEventsPending int64 `json:"late_events_pending"`
	// RetentionTrimmedThrough is where the log begins after event
	// retention (every event at or below it may have been deleted; 0:
	// none), and RetentionEventsTrimmed counts the events it deleted.
	RetentionTrimmedThrough int64 `json:"retention_trimmed_through"`
	RetentionEventsTrimmed  int64 `json:"retention_events_trimmed_total"`
	// RetentionEnabled and RetentionKeepSeconds are the retention policy
	// (docs/operations.md, "Event retention"); OldestEventAgeSeconds is how long ago,
	// by the database's clock, the oldest event still in the log was
	// appended (0 when the log is empty): the time the keep period runs on,
	// which no appender chooses, so an event claiming to occur in the
	// future ages like any other. With a policy set, an oldest event far
	// older than the keep period means something holds retention back
	// (`riverbus retention` names it).
	RetentionEnabled      bool    `json:"retention_enabled"`
	RetentionKeepSeconds  float64 `json:"retention_keep_seconds"`
	OldestEventAgeSeconds float64 `json:"oldest_event_age_seconds"`
	// Pools are the pools, by name; nil when there is none.
	Pools []*StatusPool `json:"pools"`
	// Problems are the broken assumptions of the gap proof; empty (not
	// nil) when every one holds.
	Problems []bustype.HorizonProblem `json:"problems"`
	// Failovers counts the failovers riverbus fenced (the database went
	// over to a new WAL timeline: a promoted standby, a point-in-time
	// recovery); LastFailover is the latest, nil when there was none.
	Failovers    int64           `json:"failovers_total"`
	LastFailover *StatusFailover `json:"last_failover"`

	// Processes are the riverbus processes that reported in the last 15
	// minutes (Config.ReportInterval), with the operations each failed at
	// recently; empty (not nil) when none did. A Stale one has not
	// reported for a while: what it does now is unknown.
	Processes []*StatusProcess `json:"processes"`
}

// StatusRange is a run of sequences First to Last (both included): an open
// gap, seen missing since Since, or a skipped range, skipped at Since.
type StatusRange struct {
	First int64     `json:"first"`
	Last  int64     `json:"last"`
	Since time.Time `json:"since"`
}

// StatusFailover is what riverbus did when it found the database on a new
// WAL timeline (docs/design.md §2.8): the sequences it moved past every number
// the old timeline could have handed out, and the jobs that were running
// there, retried at once.
type StatusFailover struct {
	At          time.Time `json:"at"`
	OldTimeline int64     `json:"old_timeline"`
	NewTimeline int64     `json:"new_timeline"`
	// HorizonBefore is the horizon that came through replication; the
	// numbers in (HorizonBefore, HorizonAfter] were passed as one gap.
	HorizonBefore int64 `json:"horizon_before"`
	HorizonAfter  int64 `json:"horizon_after"`
	// EventsRenumbered counts the events above HorizonBefore given new
	// numbers above HorizonAfter (same event ids).
	EventsRenumbered int64 `json:"events_renumbered"`
	// JobIDAfter is where River's job ids go on from.
	JobIDAfter int64 `json:"job_id_after"`
	// JobsRescued counts the jobs running on the old timeline that were
	// retried at once.
	JobsRescued int64 `json:"jobs_rescued"`
}

// StatusProcess is a process that runs a started Client (riverbus run,
// fanout, work, an application's own), as it last reported.
type StatusProcess struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Fanout: it runs the horizon and the fan-out. Queues are the River
	// queues it works, with the slots River fetches their jobs into.
	Fanout bool           `json:"fanout"`
	Queues map[string]int `json:"queues,omitempty"`
	// StartedAt is its first report; ReportedAt its last, ReportAgeSeconds
	// how long ago that was, and ReportIntervalSeconds how often it
	// reports (all by the database's clock).
	StartedAt             time.Time `json:"started_at"`
	ReportedAt            time.Time `json:"reported_at"`
	ReportAgeSeconds      float64   `json:"report_age_seconds"`
	ReportIntervalSeconds float64   `json:"report_interval_seconds"`
	// Stale: the process has missed StaleReports reports. It was killed,
	// or it cannot write to the database (a full disk, a read-only
	// server): what it does now is unknown, and Errors are as of its last
	// report. Its own metrics (riverbus_process_errors_total) need no
	// database.
	Stale bool `json:"stale"`
	// Errors are the operations it failed at recently, empty (not nil)
	// when none.
	Errors []StatusError `json:"errors"`
}

// StaleReports is how many report intervals a process's report may be
// late before Status calls it stale.
const StaleReports = health.StaleAfter

// StatusError is a run of failures of one operation in one process.
type StatusError struct {
	// Operation is what failed: "horizon round", "pool batch", "River
	// complete", "River fetch", "retention step", ...
	Operation string `json:"operation"`
	// Subject is the pool or River queue it failed for, "" when it
	// concerns neither.
	Subject string `json:"subject,omitempty"`
	// Count failures since Since (the run ends when the operation has not
	// failed for health.RecentWindow), the last at LastAt, LastAgeSeconds
	// ago (by the database's clock), with LastError (credentials of URLs
	// masked; escape it before printing it to a terminal).
	Count          int64     `json:"count"`
	Since          time.Time `json:"since"`
	LastAt         time.Time `json:"last_at"`
	LastAgeSeconds float64   `json:"last_age_seconds"`
	LastError      string    `json:"last_error"`
}

// Troubled reports whether a process has failed at something recently or
// has stopped reporting.
func (s *Status) Troubled() bool {
	for _, p := range s.Processes {
		if p.Stale || len(p.Errors) > 0 {
			return true
		}
	}
	return false
}

// ErrorsFor returns the recent failures that concern pool p (those of its
// pool or queue, and those of no pool or queue, such as a horizon round or
// River's completer), with the process that reported each.
func (s *Status) ErrorsFor(p *StatusPool) []ProcessError {
	var out []ProcessError
	for _, proc := range s.Processes {
		for _, e := range proc.Errors {
			if e.Subject == "" || e.Subject == p.Name || e.Subject == p.Queue {
				out = append(out, ProcessError{Process: proc, StatusError: e})
			}
		}
	}
	return out
}

// ProcessError is a StatusError with its process.
type ProcessError struct {
	Process *StatusProcess
	StatusError
}

// Pool returns the pool named name, nil when the snapshot has none.
func (s *Status) Pool(name string) *StatusPool {
	for _, p := range s.Pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// StatusPool is one pool in a Status.
type StatusPool struct {
	Name   string             `json:"name"`
	Status bustype.PoolStatus `json:"status"`
	// Condition is how the pool stands, in one word: see PoolCondition.
	Condition PoolCondition `json:"condition"`
	// Ordering is the pool's ordering, followed by its dead-letter policy
	// when the pool is ordered: "none", "key/block", "global/release".
	Ordering   string           `json:"ordering"`
	Grouping   bustype.Grouping `json:"grouping"`
	Queue      string           `json:"queue"`
	StartAfter int64            `json:"start_after"`
	// Retry is the pool's retry schedule.
	Retry bustype.RetrySchedule `json:"retry"`
	// MaxAttempts is how many times a job of the pool is tried before it
	// is a dead letter.
	MaxAttempts int `json:"max_attempts"`
	// Cursor: every event at or below it has been turned into a job of the
	// pool or filtered out.
	Cursor int64 `json:"cursor"`
	// Checkpoint: every job of the pool for an event at or below it is
	// finished (as last stored; the Client advances it as it runs).
	Checkpoint int64 `json:"checkpoint"`
	// Lag is Horizon − Checkpoint, or 0 when the checkpoint is ahead.
	Lag int64 `json:"lag"`
	// LagSeconds is the lag in time: how long ago, by the database's
	// clock, the oldest event above the checkpoint (and at or below the
	// horizon) was appended; 0 when there is none.
	LagSeconds float64 `json:"lag_seconds"`
	// CheckpointTime is the time the pool's position corresponds to: when
	// the newest event at or below its checkpoint was appended, by the
	// database's clock. A reset to it (PoolResetToTime) re-delivers from
	// about the checkpoint on. Nil when no such event is in the log (none
	// yet, or retention deleted them).
	CheckpointTime *time.Time `json:"checkpoint_time,omitempty"`
	// AheadOfLog is how far the pool's position (the highest of its
	// cursor, checkpoint and start point) is above the end of the log: the
	// last sequence handed out, or the horizon when higher. 0 normally.
	// Above it, the events that get the numbers in between will never
	// reach the pool, and it reports a lag of 0 meanwhile. PoolCreate and
	// PoolReset refuse such a position; a pool gets there by SQL, or by a
	// reset made before they did.
	AheadOfLog          int64 `json:"ahead_of_log"`
	EventsFannedOut     int64 `json:"events_fanned_out_total"`
	LateEventsDelivered int64 `json:"late_events_delivered_total"`
	// Jobs counts the pool's River jobs by state; states without jobs are
	// absent.
	Jobs map[bustype.JobState]int64 `json:"jobs_by_state"`
	// DeadLetters counts the pool's dead letters; UndeliverableDeadLetters
	// those of them made of events the fan-out could not turn into jobs.
	DeadLetters              int64 `json:"dead_letters"`
	UndeliverableDeadLetters int64 `json:"undeliverable_dead_letters,omitempty"`
	// LastError is the error that matters most now: that of the job
	// holding the checkpoint (or of what blocks its lane) when it is stuck,
	// else that of the newest dead letter; "" when there is none. It is the
	// handler's text, with the credentials of any URL in it masked
	// (webhook.Redact): escape it before printing it to a terminal.
	LastError string `json:"last_error,omitempty"`
	// CompletedLastMinute counts the pool's jobs completed in the last
	// minute (of those River still keeps).
	CompletedLastMinute int64 `json:"completed_last_minute"`
	// Holder is the job that holds the checkpoint, nil when the pool has no
	// unfinished job: checkpoint.GetHolder's, with its LastError and its
	// LaneBlocker's masked as the pool's LastError is. Its Stuck, Stalled
	// and Blocker say whether and why it matters; its JSON
	// (checkpoint.Holder.MarshalJSON) adds held_seconds and stuck.
	Holder *checkpoint.Holder `json:"checkpoint_holder,omitempty"`
	// WorkerSlots is how many jobs of the pool's queue the listed
	// processes' River clients can hold running at once (Processes'
	// Queues). RunningStuck counts the pool's jobs River shows running
	// that started over checkpoint.StuckAfter ago. RunningAboveWorkers is
	// how many of those no worker can be running: the queue's long-running
	// jobs beyond its slots. Above 0, their completions failed (see the
	// processes' errors) or their workers died, and River's rescuer has not
	// retried them yet; their lanes and the checkpoint wait meanwhile.
	WorkerSlots         int64 `json:"worker_slots"`
	RunningStuck        int64 `json:"running_stuck"`
	RunningAboveWorkers int64 `json:"running_above_workers"`
}

// PoolCondition is how a pool stands, in one word, as StatusPool.Condition
// gives it. The first that applies wins, in the order of the constants.
type PoolCondition string

const (
	// PoolConditionPaused: the pool is paused (it may lag; nothing moves
	// until it is resumed).
	PoolConditionPaused PoolCondition = "paused"
	// PoolConditionStalled: the job holding the checkpoint, or what blocks
	// its lane, has failed (Holder says which, with its attempt and last
	// error), and it is a dead letter, or it has held the checkpoint for
	// checkpoint.StalledAfter, or its next attempt is that far away
	// (Holder.Stalled). A job that failed once and is retried within
	// seconds does not stall its pool.
	PoolConditionStalled PoolCondition = "stalled"
	// PoolConditionHeld: the checkpoint has stood still for
	// checkpoint.StuckAfter behind a job that has not failed: a handler
	// that hangs, or no worker runs the pool's queue.
	PoolConditionHeld PoolCondition = "held"
	// PoolConditionCatchingUp: nothing holds the pool, but it is at least
	// StatusCatchingUpLag events behind the horizon.
	PoolConditionCatchingUp PoolCondition = "catching_up"
	// PoolConditionActive: none of the above.
	PoolConditionActive PoolCondition = "active"
)

// String is the condition in words: "catching up".
func (c PoolCondition) String() string {
	if c == PoolConditionCatchingUp {
		return "catching up"
	}
	return string(c)
}

// condition is the pool's PoolCondition, from the fields Status has set.
func (p *StatusPool) condition() PoolCondition {
	h := p.Holder
	switch {
	case p.Status == bustype.PoolPaused:
		return PoolConditionPaused
	case h != nil && h.Stalled():
		return PoolConditionStalled
	case h != nil && h.HeldFor() >= checkpoint.StuckAfter:
		return PoolConditionHeld
	case p.Lag >= StatusCatchingUpLag:
		return PoolConditionCatchingUp
	}
	return PoolConditionActive
}

// Status reads a snapshot of the horizon and every pool in one read-only
// transaction. It needs no Start. A missing horizon row gives an error
// wrapping bustype.ErrHorizonMissing (see HorizonRepair).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st *Status
	err := pgx.BeginTxFunc(ctx, c.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		st, err = readStatus(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	return st, nil
}

func readStatus(ctx context.Context, tx pgx.Tx) (*Status, error) {
	h, err := horizon.Get(ctx, tx)
	if err != nil {
		return nil, err
	}
	st := &Status{At: time.Now(), Horizon: h.Horizon, OpenGaps: h.OpenGaps, WatchedSkipped: h.Watching,
		WatchedSkippedRanges: h.WatchingRanges, GapsProvenDead: h.GapsProvenDead, GapsSkipped: h.GapsSkipped,
		LateEvents: h.LateEvents, LateEventsPending: h.LatePending, Problems: h.Problems, HorizonUpdatedAt: h.UpdatedAt}
	if st.Problems == nil {
		st.Problems = []bustype.HorizonProblem{}
	}
	st.Failovers = h.Failovers
	if f := h.LastFailover; f != nil {
		st.LastFailover = &StatusFailover{At: f.FencedAt, OldTimeline: f.OldTimeline, NewTimeline: f.NewTimeline,
			HorizonBefore: f.HorizonBefore, HorizonAfter: f.HorizonAfter, EventsRenumbered: f.EventsRenumbered,
			JobIDAfter: f.JobIDAfter, JobsRescued: f.JobsRescued}
	}
	var dbNow time.Time
	var oldest *time.Time
	if err := tx.QueryRow(ctx, sqlStatusSequences).Scan(&st.LastSequence, &st.LastCommitted, &dbNow, &oldest); err != nil {
		return nil, fmt.Errorf("last sequence: %w", err)
	}
	if oldest != nil {
		st.OldestEventAgeSeconds = max(0, dbNow.Sub(*oldest).Seconds())
	}
	st.HorizonAgeSeconds = max(0, dbNow.Sub(h.UpdatedAt).Seconds())
	if st.GapRanges, err = readRanges(ctx, tx, sqlStatusGapRanges); err != nil {
		return nil, fmt.Errorf("read open gaps: %w", err)
	}
	if st.SkippedRanges, err = readRanges(ctx, tx, sqlStatusSkippedRanges); err != nil {
		return nil, fmt.Errorf("read skipped ranges: %w", err)
	}
	policy, err := retention.GetPolicy(ctx, tx)
	if err != nil {
		return nil, err
	}
	st.RetentionTrimmedThrough, st.RetentionEventsTrimmed = policy.TrimmedThrough, policy.EventsTrimmed
	st.RetentionEnabled, st.RetentionKeepSeconds = policy.Enabled, policy.Keep.Seconds()
	all, err := pools.List(ctx, tx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*StatusPool{}
	for _, p := range all {
		ordering := string(p.Ordering)
		if p.Ordering.Ordered() {
			ordering += "/" + string(p.OnDeadLetter) // "key/block"
		}
		sp := &StatusPool{Name: p.Name, Status: p.Status, Ordering: ordering, Grouping: p.Grouping, Queue: p.Queue,
			StartAfter: p.StartAfter, Retry: p.Retry, MaxAttempts: p.MaxAttempts, Cursor: p.Cursor, Checkpoint: p.Checkpoint, Lag: max(0, h.Horizon-p.Checkpoint),
			AheadOfLog:      max(0, max(p.Cursor, p.Checkpoint, p.StartAfter)-max(h.Horizon, st.LastSequence)),
			EventsFannedOut: p.EventsFannedOut, LateEventsDelivered: p.LateEventsDelivered, Jobs: map[bustype.JobState]int64{}}
		holder, err := checkpoint.GetHolder(ctx, tx, p.Name)
		if err != nil {
			return nil, err
		}
		sp.Holder = redacted(holder)
		if sp.Lag > 0 {
			var age *float64
			if err := tx.QueryRow(ctx, sqlStatusLagAge, max(p.Checkpoint, p.StartAfter), h.Horizon).Scan(&age); err != nil {
				return nil, fmt.Errorf("pool %s: lag in time: %w", p.Name, err)
			}
			if age != nil {
				sp.LagSeconds = max(0, *age)
			}
		}
		st.Pools = append(st.Pools, sp)
		byName[p.Name] = sp
	}

	// Per-pool counts: each query's rows start with the pool's name.
	var (
		pool, state string
		n, undeliv  int64
		lastErr     *string
		at          *time.Time
	)
	for _, q := range []struct {
		what, sql string
		dest      []any
		set       func(*StatusPool)
	}{
		{"count jobs", sqlStatusJobs, []any{&pool, &state, &n}, func(sp *StatusPool) {
			sp.Jobs[bustype.JobState(state)] = n
		}},
		{"count dead letters", sqlStatusDeadLetters, []any{&pool, &n, &undeliv, &lastErr}, func(sp *StatusPool) {
			sp.DeadLetters, sp.UndeliverableDeadLetters = n, undeliv
			if lastErr != nil {
				sp.LastError = redact.Text(*lastErr)
			}
		}},
		{"count completed jobs", sqlStatusCompleted, []any{&pool, &n}, func(sp *StatusPool) {
			sp.CompletedLastMinute = n
		}},
		{"read checkpoint times", sqlStatusCheckpointTimes, []any{&pool, &at}, func(sp *StatusPool) {
			if at != nil {
				t := *at
				sp.CheckpointTime = &t
			}
		}},
	} {
		rows, err := tx.Query(ctx, q.sql)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.what, err)
		}
		if _, err := pgx.ForEachRow(rows, q.dest, func() error {
			if sp := byName[pool]; sp != nil {
				q.set(sp)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", q.what, err)
		}
	}
	if st.Processes, err = readProcesses(ctx, tx); err != nil {
		return nil, err
	}
	if err := readRunningStuck(ctx, tx, st); err != nil {
		return nil, err
	}
	for _, sp := range st.Pools {
		if h := sp.Holder; h != nil && h.Stuck() {
			if e := h.Blocker().LastError; e != "" {
				sp.LastError = e
			}
		}
		sp.Condition = sp.condition()
	}
	return st, nil
}

// readRanges reads the runs of sequences query returns: first, last, since.
func readRanges(ctx context.Context, tx pgx.Tx, query string) ([]StatusRange, error) {
	rows, err := tx.Query(ctx, query, StatusRangesMax)
	if err != nil {
		return nil, err
	}
	ranges, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StatusRange, error) {
		var r StatusRange
		err := row.Scan(&r.First, &r.Last, &r.Since)
		return r, err
	})
	if ranges == nil {
		ranges = []StatusRange{}
	}
	return ranges, err
}

// redacted returns a copy of h, nil or not, whose errors have the
// credentials of any URL in them masked: Status shows its holders to
// operators and scripts, as it does the pools' LastError.
func redacted(h *checkpoint.Holder) *checkpoint.Holder {
	if h == nil {
		return nil
	}
	r := *h
	r.LastError = redact.Text(r.LastError)
	if h.LaneBlocker != nil {
		b := *h.LaneBlocker
		b.LastError = redact.Text(b.LastError)
		r.LaneBlocker = &b
	}
	return &r
}

// readProcesses reads the processes' reports (migration 021) that have not
// expired, with their errors.
func readProcesses(ctx context.Context, tx pgx.Tx) ([]*StatusProcess, error) {
	procs := []*StatusProcess{}
	byID := map[string]*StatusProcess{}
	var (
		p        StatusProcess
		interval float64
	)
	rows, err := tx.Query(ctx, sqlStatusProcesses, health.ExpireAfter)
	if err != nil {
		return nil, fmt.Errorf("read process reports: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&p.ID, &p.Name, &p.Host, &p.PID, &p.StartedAt, &p.ReportedAt, &p.ReportAgeSeconds, &interval, &p.Fanout, &p.Queues}, func() error {
		q := p
		q.ReportIntervalSeconds = interval
		q.Stale = q.ReportAgeSeconds > StaleReports*interval
		q.Errors = []StatusError{}
		q.Name, q.Host = redact.Text(q.Name), redact.Text(q.Host)
		procs = append(procs, &q)
		byID[q.ID] = &q
		p.Queues = nil
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read process reports: %w", err)
	}
	var (
		id string
		e  StatusError
	)
	rows, err = tx.Query(ctx, sqlStatusProcessErrors, health.ExpireAfter)
	if err != nil {
		return nil, fmt.Errorf("read process errors: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &e.Operation, &e.Subject, &e.Count, &e.Since, &e.LastAt, &e.LastAgeSeconds, &e.LastError}, func() error {
		if proc := byID[id]; proc != nil {
			e.LastError = redact.Text(e.LastError)
			proc.Errors = append(proc.Errors, e)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read process errors: %w", err)
	}
	return procs, nil
}

// readRunningStuck sets each pool's WorkerSlots, RunningStuck and
// RunningAboveWorkers: the jobs River shows running for longer than
// checkpoint.StuckAfter, per queue, against the slots the listed processes
// report for it. Every job a River client runs holds one of its slots, so
// those beyond the slots run nowhere.
func readRunningStuck(ctx context.Context, tx pgx.Tx, st *Status) error {
	slots := map[string]int64{}
	for _, p := range st.Processes {
		for q, n := range p.Queues {
			slots[q] += int64(n)
		}
	}
	type poolQueue struct{ pool, queue string }
	stuck := map[poolQueue]int64{}
	inQueue := map[string]int64{}
	var (
		pool, queue string
		n           int64
	)
	rows, err := tx.Query(ctx, sqlStatusRunningStuck, checkpoint.StuckAfter)
	if err != nil {
		return fmt.Errorf("count running jobs: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&pool, &queue, &n}, func() error {
		stuck[poolQueue{pool, queue}] += n
		inQueue[queue] += n
		return nil
	}); err != nil {
		return fmt.Errorf("count running jobs: %w", err)
	}
	for _, sp := range st.Pools {
		sp.WorkerSlots = slots[sp.Queue]
		for pq, n := range stuck {
			if pq.pool != sp.Name {
				continue
			}
			sp.RunningStuck += n
			if excess := inQueue[pq.queue] - slots[pq.queue]; excess > 0 {
				sp.RunningAboveWorkers += min(n, excess)
			}
		}
	}
	return nil
}
