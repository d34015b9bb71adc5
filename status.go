package riverbus

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/checkpoints"
	"github.com/riverbus/riverbus/internal/horizon"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/redact"
	"github.com/riverbus/riverbus/internal/retention"
)

// StatusStuckAfter is how long a pool's checkpoint may stand still behind a
// job that has not failed before Status calls it stuck (a handler that
// hangs, a worker that is not running).
const StatusStuckAfter = time.Minute

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
	// timeout that are still watched for a late commit.
	WatchedSkipped int64 `json:"watched_skipped"`
	// GapsProvenDead, GapsSkipped and LateEvents count, since the schema
	// was created, the missing sequences proven rolled back, those skipped
	// on the gap timeout, and those of them that committed after all.
	GapsProvenDead int64 `json:"gaps_proven_dead_total"`
	GapsSkipped    int64 `json:"gaps_skipped_total"`
	LateEvents     int64 `json:"late_events_total"`
	// RetentionTrimmedThrough is where the log begins after event
	// retention (every event at or below it may have been deleted; 0:
	// none), and RetentionEventsTrimmed counts the events it deleted.
	RetentionTrimmedThrough int64 `json:"retention_trimmed_through"`
	RetentionEventsTrimmed  int64 `json:"retention_events_trimmed_total"`
	// RetentionEnabled and RetentionKeepSeconds are the retention policy
	// (README "Event retention"); OldestEventAgeSeconds is how long ago,
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
}

// StatusFailover is what riverbus did when it found the database on a new
// WAL timeline (DESIGN.md §2.8): the sequences it moved past every number
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
	// Ordering is the pool's ordering, followed by its dead-letter policy
	// when the pool is ordered: "none", "key/block", "global/release".
	Ordering   string           `json:"ordering"`
	Grouping   bustype.Grouping `json:"grouping"`
	Queue      string           `json:"queue"`
	StartAfter int64            `json:"start_after"`
	// Retry is the pool's retry schedule.
	Retry bustype.RetrySchedule `json:"retry"`
	// Cursor: every event at or below it has been turned into a job of the
	// pool or filtered out.
	Cursor int64 `json:"cursor"`
	// Checkpoint: every job of the pool for an event at or below it is
	// finished (as last stored; the Client advances it as it runs).
	Checkpoint int64 `json:"checkpoint"`
	// Lag is Horizon − Checkpoint, or 0 when the checkpoint is ahead.
	Lag int64 `json:"lag"`
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
	// unfinished job.
	Holder *StatusHolder `json:"checkpoint_holder,omitempty"`
}

// StatusJob is a job in a Status: one holding a checkpoint, or what blocks
// its lane.
type StatusJob struct {
	JobID          int64            `json:"job_id"`
	GlobalSequence int64            `json:"global_sequence"`
	State          bustype.JobState `json:"state"`
	// DeadLetter: River discarded the job after its last attempt; it waits
	// for DeadLetterRetry or DeadLetterPurge.
	DeadLetter  bool `json:"dead_letter,omitempty"`
	Attempt     int  `json:"attempt"`
	MaxAttempts int  `json:"max_attempts"`
	// NextAttemptAt is set for a retryable or scheduled job;
	// NextAttemptIn is how long until then by the database's clock.
	NextAttemptAt *time.Time    `json:"next_attempt_at,omitempty"`
	NextAttemptIn time.Duration `json:"-"`
	DiscardedAt   *time.Time    `json:"discarded_at,omitempty"`
	// LastError is the error of the last failed attempt (the handler's
	// text, URLs' credentials masked).
	LastError string `json:"last_error,omitempty"`
	// Lane is the job's lane in an ordered pool, nil in other pools.
	Lane *string `json:"lane,omitempty"`
}

// Troubled reports whether the job has failed, waits for a retry, or is a
// dead letter.
func (j *StatusJob) Troubled() bool {
	return j.DeadLetter || j.LastError != "" || j.State == bustype.JobStateRetryable || j.State == bustype.JobStateScheduled
}

// StatusHolder is the job holding a pool's checkpoint: the pool's unfinished
// job of the lowest sequence.
type StatusHolder struct {
	StatusJob
	// HeldSince is when the checkpoint last moved (or the job was created,
	// when later); HeldSeconds how long ago that was by the database's
	// clock.
	HeldSince   time.Time `json:"held_since"`
	HeldSeconds float64   `json:"held_seconds"`
	// LaneBlockedBy is what a pending holder's lane waits for: the lane's
	// job in flight or its dead letter.
	LaneBlockedBy *StatusJob `json:"lane_blocked_by,omitempty"`
	// Stuck: the holder, or what blocks its lane, has failed, waits for a
	// retry or is a dead letter, or the checkpoint has stood still for
	// StatusStuckAfter.
	Stuck bool `json:"stuck"`
}

// Blocker is what blocks the holder's lane, or else the holder itself: the
// job to look at.
func (h *StatusHolder) Blocker() *StatusJob {
	if h.LaneBlockedBy != nil {
		return h.LaneBlockedBy
	}
	return &h.StatusJob
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
		GapsProvenDead: h.GapsProvenDead, GapsSkipped: h.GapsSkipped, LateEvents: h.LateEvents, Problems: h.Problems,
		HorizonUpdatedAt: h.UpdatedAt}
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
			StartAfter: p.StartAfter, Retry: p.Retry, Cursor: p.Cursor, Checkpoint: p.Checkpoint, Lag: max(0, h.Horizon-p.Checkpoint),
			AheadOfLog:      max(0, max(p.Cursor, p.Checkpoint, p.StartAfter)-max(h.Horizon, st.LastSequence)),
			EventsFannedOut: p.EventsFannedOut, LateEventsDelivered: p.LateEventsDelivered, Jobs: map[bustype.JobState]int64{}}
		holder, err := checkpoints.GetHolder(ctx, tx, p.Name)
		if err != nil {
			return nil, err
		}
		sp.Holder = newStatusHolder(holder)
		st.Pools = append(st.Pools, sp)
		byName[p.Name] = sp
	}

	// Per-pool counts: each query's rows start with the pool's name.
	var (
		pool, state string
		n, undeliv  int64
		lastErr     *string
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
	for _, sp := range st.Pools {
		if h := sp.Holder; h != nil && h.Stuck {
			if e := h.Blocker().LastError; e != "" {
				sp.LastError = e
			}
		}
	}
	return st, nil
}

func newStatusJob(j bustype.PoolJob, at time.Time) StatusJob {
	r := StatusJob{JobID: j.ID, GlobalSequence: j.Sequence, State: j.State, DeadLetter: j.DeadLetter,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, LastError: redact.Text(j.LastError), Lane: j.Lane}
	if (r.State == bustype.JobStateRetryable || r.State == bustype.JobStateScheduled) && !j.ScheduledAt.IsZero() {
		next := j.ScheduledAt
		r.NextAttemptAt = &next
		r.NextAttemptIn = j.ScheduledAt.Sub(at)
	}
	if !j.DiscardedAt.IsZero() {
		d := j.DiscardedAt
		r.DiscardedAt = &d
	}
	return r
}

func newStatusHolder(h *bustype.CheckpointHolder) *StatusHolder {
	if h == nil {
		return nil
	}
	r := &StatusHolder{StatusJob: newStatusJob(h.PoolJob, h.At), HeldSince: h.HeldSince, HeldSeconds: h.HeldFor().Seconds()}
	if h.LaneBlocker != nil {
		b := newStatusJob(*h.LaneBlocker, h.At)
		r.LaneBlockedBy = &b
	}
	r.Stuck = h.HeldFor() >= StatusStuckAfter || r.Troubled() || (r.LaneBlockedBy != nil && r.LaneBlockedBy.Troubled())
	return r
}
