package pools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/retention"
	"github.com/riverbus/riverbus/internal/riversql"
	"github.com/riverbus/riverbus/workers"
	"github.com/riverqueue/river"
)

var (
	queueNameRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)
	tagRE       = regexp.MustCompile(`^[^=]+=`)
)

func normalize(p *bustype.PoolParams) error {
	if !riversql.PoolName.MatchString(p.Name) {
		return fmt.Errorf("%w: name %q must be 2-100 letters, digits, _ . - or :, starting with a letter, digit or _ (River job kinds have at least two characters)", bustype.ErrInvalidPool, p.Name)
	}
	if p.Queue == "" {
		p.Queue = bustype.DefaultQueue(p.Name)
	}
	if len(p.Queue) > 64 || !queueNameRE.MatchString(p.Queue) {
		return fmt.Errorf("%w: queue %q must be lower-case letters and digits separated by _ or -, at most 64 chars", bustype.ErrInvalidPool, p.Queue)
	}
	for _, typ := range p.EventTypes {
		if typ == "" || len([]rune(typ)) > 255 {
			return fmt.Errorf("%w: event type filter %q must be 1-255 characters", bustype.ErrInvalidPool, typ)
		}
	}
	for _, tag := range p.Tags {
		if !tagRE.MatchString(tag) {
			return fmt.Errorf("%w: tag filter %q must be name=value", bustype.ErrInvalidPool, tag)
		}
	}
	p.EventTypes = sortedUnique(p.EventTypes)
	p.Tags = sortedUnique(p.Tags)
	if p.MaxAttempts == 0 {
		p.MaxAttempts = bustype.MaxAttemptsDefault
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > 1000 {
		return fmt.Errorf("%w: max attempts must be between 1 and 1000, got %d", bustype.ErrInvalidPool, p.MaxAttempts)
	}
	if p.Priority == 0 {
		p.Priority = bustype.PriorityDefault
	}
	if p.Priority < 1 || p.Priority > 4 {
		return fmt.Errorf("%w: priority must be between 1 and 4, got %d", bustype.ErrInvalidPool, p.Priority)
	}
	var err error
	if p.Ordering, err = bustype.ParseOrdering(string(p.Ordering)); err != nil {
		return err
	}
	if p.OnDeadLetter, err = bustype.ParseDeadLetterPolicy(string(p.OnDeadLetter)); err != nil {
		return err
	}
	if p.Grouping, err = bustype.ParseGrouping(string(p.Grouping)); err != nil {
		return err
	}
	p.Retry = p.Retry.WithDefaults()
	if err := p.Retry.Validate(); err != nil {
		return err
	}
	if after, ok := p.From.After(); ok && after < 0 {
		return fmt.Errorf("%w: start sequence must be >= 0, got %d", bustype.ErrInvalidPool, after)
	}
	return nil
}

func sortedUnique(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// Create creates a pool and reports whether it was created. A pool that
// exists with the same settings is left alone; with other settings it is an
// bustype.ErrPoolExists error unless params.Update is set, which changes them (the
// start position and cursor of an existing pool never change here).
func Create(ctx context.Context, db database.DB, params bustype.PoolParams) (*bustype.Pool, bool, error) {
	if err := normalize(&params); err != nil {
		return nil, false, err
	}
	var (
		pool    *bustype.Pool
		created bool
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Retention waits while the start is set, and the start is never
		// below where the log begins (docs/design.md §8).
		trimmed, err := retention.StartFloor(ctx, tx, "pool create")
		if err != nil {
			return err
		}
		startAfter := trimmed // the beginning: the oldest retained event
		if after, ok := params.From.After(); ok && after > 0 {
			if after < trimmed {
				return retention.TrimmedError("start sequence", after, trimmed)
			}
			startAfter = after
		} else if params.From.IsNow() {
			// Every sequence handed out so far is before "now".
			if err := tx.QueryRow(ctx, sqlLastSequence).Scan(&startAfter); err != nil {
				return fmt.Errorf("read last sequence: %w", err)
			}
		}
		r := params.Retry
		rows, err := tx.Query(ctx, sqlPoolInsert, params.Name, params.Queue, params.EventTypes, params.Tags,
			params.MaxAttempts, params.Priority, startAfter, params.Ordering, params.OnDeadLetter, params.Grouping,
			r.Base, r.Factor, r.MaxDelay, r.Jitter)
		if err != nil {
			return err
		}
		inserted, err := pgx.CollectRows(rows, scanPool)
		if err != nil {
			return translatePoolErr(err)
		}
		if len(inserted) == 1 {
			pool, created = inserted[0], true
			if _, err := tx.Exec(ctx, sqlPoolStartSet, params.Name, startAfter); err != nil {
				return fmt.Errorf("record start point: %w", err)
			}
			return nil
		}
		// Nothing inserted: the pool exists (its start point never
		// changes here), or the start point is beyond the end of the log.
		existing, err := get(ctx, tx, params.Name, true)
		if errors.Is(err, bustype.ErrUnknownPool) {
			return beyondLogError(ctx, tx, "start sequence", startAfter)
		}
		if err != nil {
			return err
		}
		if sameSettings(existing, &params) {
			pool = existing
			return nil
		}
		if !params.Update {
			return fmt.Errorf("%w: pool %q has queue=%s types=%v tags=%v max_attempts=%d priority=%d ordering=%s on_dead_letter=%s grouping=%s retry %s; set Update to change them",
				bustype.ErrPoolExists, existing.Name, existing.Queue, existing.EventTypes, existing.Tags, existing.MaxAttempts, existing.Priority,
				existing.Ordering, existing.OnDeadLetter, existing.Grouping, existing.Retry)
		}
		pool, err = collectOne(tx.Query(ctx, sqlPoolUpdate, params.Name, params.Queue, params.EventTypes, params.Tags,
			params.MaxAttempts, params.Priority, params.Ordering, params.OnDeadLetter, params.Grouping,
			r.Base, r.Factor, r.MaxDelay, r.Jitter))
		if err != nil {
			return err
		}
		if !sameDelivery(existing, &params) {
			if _, err := tx.Exec(ctx, sqlPoolStartSet, params.Name, nil); err != nil {
				return fmt.Errorf("record start point: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("create pool %q: %w", params.Name, err)
	}
	return pool, created, nil
}

// sameDelivery reports whether params change nothing of what the pool
// receives and how it is cut into jobs: its filter, ordering and grouping.
func sameDelivery(p *bustype.Pool, params *bustype.PoolParams) bool {
	return slices.Equal(p.EventTypes, params.EventTypes) && slices.Equal(p.Tags, params.Tags) &&
		p.Ordering == params.Ordering && p.Grouping == params.Grouping
}

func sameSettings(p *bustype.Pool, params *bustype.PoolParams) bool {
	return p.Queue == params.Queue && slices.Equal(p.EventTypes, params.EventTypes) &&
		slices.Equal(p.Tags, params.Tags) && p.MaxAttempts == params.MaxAttempts && p.Priority == params.Priority &&
		p.Ordering == params.Ordering && p.OnDeadLetter == params.OnDeadLetter && p.Grouping == params.Grouping &&
		p.Retry == params.Retry
}

// Get returns one pool, or an error wrapping bustype.ErrUnknownPool that lists
// the pools that exist.
func Get(ctx context.Context, db database.DB, name string) (*bustype.Pool, error) {
	return get(ctx, db, name, false)
}

func get(ctx context.Context, db database.DB, name string, forUpdate bool) (*bustype.Pool, error) {
	q := sqlPoolGet
	if forUpdate {
		q = sqlPoolGetForUpdate
	}
	pool, err := collectOne(db.Query(ctx, q, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, UnknownError(ctx, db, name)
	}
	return pool, err
}

// UnknownError builds the bustype.ErrUnknownPool error for name, listing the
// pools that exist.
func UnknownError(ctx context.Context, db database.DB, name string) error {
	pools, err := List(ctx, db)
	if err != nil {
		return fmt.Errorf("%w %q", bustype.ErrUnknownPool, name)
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name
	}
	if len(names) == 0 {
		return fmt.Errorf("%w %q: no pools exist yet", bustype.ErrUnknownPool, name)
	}
	return fmt.Errorf("%w %q: pools are %s", bustype.ErrUnknownPool, name, strings.Join(names, ", "))
}

// List returns every pool, by name.
func List(ctx context.Context, db database.DB) ([]*bustype.Pool, error) {
	rows, err := db.Query(ctx, sqlPoolList)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	pools, err := pgx.CollectRows(rows, scanPool)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return pools, nil
}

// SetStatus pauses (bustype.PoolPaused) or resumes (bustype.PoolActive) a pool: its
// fan-out, and, when no other pool shares its River queue, its handlers too
// (River's queue pause: workers finish the jobs they hold and fetch no
// more). Nothing is lost: a paused pool's cursor and jobs stay where they
// are. sharedQueue reports that the queue is shared, so the handlers were
// left running.
func SetStatus(ctx context.Context, db database.DB, name string, status bustype.PoolStatus) (pool *bustype.Pool, sharedQueue bool, err error) {
	if status != bustype.PoolActive && status != bustype.PoolPaused {
		return nil, false, fmt.Errorf("%w: status must be %s or %s, got %q", bustype.ErrInvalidPool, bustype.PoolActive, bustype.PoolPaused, status)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// The queue's row, then the pool's (a fan-out batch of the pool in
		// flight holds it): River UI's pause locks the queue's row and then,
		// through riverbus_queue_paused, its pools' rows, so the same order
		// here keeps the two from deadlocking.
		err := database.WaitLockTx(ctx, tx, "pool "+string(status), retention.LockTimeout, func() error {
			if _, err := tx.Exec(ctx, sqlPoolQueueLock, name); err != nil {
				return err
			}
			var err error
			pool, err = collectOne(tx.Query(ctx, sqlPoolSetStatus, name, status))
			return err
		})
		if err != nil {
			return err
		}
		var sharing int
		if err := tx.QueryRow(ctx, sqlPoolsSharingQueue, pool.Queue, name).Scan(&sharing); err != nil {
			return err
		}
		if sharing > 0 {
			sharedQueue = true
			return nil
		}
		// River pauses only queues it has a row for: make sure there is one
		// (a worker that starts later then starts paused).
		if _, err := tx.Exec(ctx, riversql.QueueEnsure, pool.Queue); err != nil {
			return fmt.Errorf("river queue: %w", err)
		}
		rc, err := river.NewClient(workers.NewDriver(nil, nil), &river.Config{})
		if err != nil {
			return err
		}
		if status == bustype.PoolPaused {
			err = rc.QueuePauseTx(ctx, tx, pool.Queue, nil)
		} else {
			err = rc.QueueResumeTx(ctx, tx, pool.Queue, nil)
		}
		if err != nil {
			return fmt.Errorf("river queue %s: %w", pool.Queue, err)
		}
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, UnknownError(ctx, db, name)
	}
	if err != nil {
		return nil, false, fmt.Errorf("set pool %q %s: %w", name, status, err)
	}
	return pool, sharedQueue, nil
}

// lockPool locks the pool's row for op in tx. A fan-out batch of the pool
// in flight holds it; the wait is bounded and names the holder when it
// runs out.
func lockPool(ctx context.Context, tx pgx.Tx, op, name string) error {
	return database.WaitLockTx(ctx, tx, op, retention.LockTimeout, func() error {
		_, err := get(ctx, tx, name, true)
		return err
	})
}

func collectOne(rows pgx.Rows, err error) (*bustype.Pool, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectExactlyOneRow(rows, scanPool)
}

func scanPool(row pgx.CollectableRow) (*bustype.Pool, error) {
	var p bustype.Pool
	var maxAttempts, priority int16
	err := row.Scan(&p.Name, &p.Queue, &p.EventTypes, &p.Tags, &maxAttempts, &priority, &p.StartAfter, &p.Status,
		&p.Ordering, &p.OnDeadLetter, &p.Grouping, &p.Retry.Base, &p.Retry.Factor, &p.Retry.MaxDelay, &p.Retry.Jitter,
		&p.Cursor, &p.Checkpoint, &p.EventsFannedOut, &p.LateEventsDelivered, &p.CreatedAt, &p.UpdatedAt)
	p.MaxAttempts, p.Priority = int(maxAttempts), int(priority)
	return &p, err
}

func translatePoolErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.CheckViolation {
		return fmt.Errorf("%w: %s", bustype.ErrInvalidPool, pgErr.ConstraintName)
	}
	return err
}

// Reset moves a pool's cursor to after sequence to, so every event above
// it is fanned out again (rebuilding a projection from history), and sets
// its checkpoint to the same place. It waits for a fan-out batch of the pool
// in flight to finish, and for a retention batch in flight (docs/design.md §8):
// to 0 is where the log begins after retention, and a to below that is an
// bustype.ErrInvalidPool error. A to beyond the end of the log (the last
// sequence handed out, or the horizon when higher) is a
// *bustype.StartBeyondLogError: the pool would skip the events appended
// next. Jobs already created are left alone.
func Reset(ctx context.Context, db database.DB, name string, to int64) (*bustype.Pool, error) {
	r, err := ResetReplay(ctx, db, name, to)
	if err != nil {
		return nil, err
	}
	return r.Pool, nil
}

// Replay is what a reset starts: the pool delivers the events in (After,
// Through] again, as jobs whose ids are above JobsAfter.
type Replay struct {
	// Pool is the pool as the reset left it.
	Pool *bustype.Pool
	// After is the reset point: the replay starts with the event after it.
	After int64
	// Through is the horizon when the reset ran: the last event the
	// replay delivers again. Events above it are new, not replayed.
	Through int64
	// JobsAfter is the highest River job id when the reset ran: every job
	// of the replay has a higher id, which tells its dead letters from
	// older ones of the same events.
	JobsAfter int64
	// MarkAt, for a reset to a time, is the time of the horizon's mark
	// After comes from: every event committed after it is above After.
	// Zero for a reset to a sequence.
	MarkAt time.Time
}

// ResetReplay is Reset returning the replay it starts.
func ResetReplay(ctx context.Context, db database.DB, name string, to int64) (*Replay, error) {
	if to < 0 {
		return nil, fmt.Errorf("%w: reset position must be >= 0, got %d", bustype.ErrInvalidPool, to)
	}
	return resetReplay(ctx, db, name, func(_ pgx.Tx, trimmed int64) (int64, time.Time, error) {
		switch {
		case to == 0:
			return trimmed, time.Time{}, nil
		case to < trimmed:
			return 0, time.Time{}, retention.TrimmedError("reset position", to, trimmed)
		}
		return to, time.Time{}, nil
	})
}

// ResetReplayToTime is ResetReplay to the position of a time: every event
// committed after t is delivered again (docs/design.md §11). The position
// is the committed_through of the latest horizon mark at or before t, so
// the events committed between that mark and t are delivered again too.
// A t after the database's clock, before the first event the log keeps,
// or before the first mark that reaches where the log begins is refused
// with a *bustype.RewindTimeError.
func ResetReplayToTime(ctx context.Context, db database.DB, name string, t time.Time) (*Replay, error) {
	return resetReplay(ctx, db, name, func(tx pgx.Tx, trimmed int64) (int64, time.Time, error) {
		return rewindPoint(ctx, tx, t, trimmed)
	})
}

// rewindPoint is the position of a reset to t and the time of the mark it
// comes from, read in tx after retention was locked out (the log's start,
// trimmed, stays where it is until tx ends).
func rewindPoint(ctx context.Context, tx pgx.Tx, t time.Time, trimmed int64) (int64, time.Time, error) {
	e := &bustype.RewindTimeError{Time: t}
	var (
		firstAt, lastAt, markAt, exactFrom *time.Time
		through                            *int64
	)
	if err := tx.QueryRow(ctx, sqlRewindPoint, t).Scan(&e.Now, &e.FirstSequence, &firstAt, &e.LastSequence, &lastAt,
		&markAt, &through, &exactFrom); err != nil {
		return 0, time.Time{}, fmt.Errorf("read the horizon's marks: %w", err)
	}
	for _, v := range []struct {
		dst *time.Time
		src *time.Time
	}{{&e.FirstAppendedAt, firstAt}, {&e.LastAppendedAt, lastAt}, {&e.ExactFrom, exactFrom}} {
		if v.src != nil {
			*v.dst = *v.src
		}
	}
	switch {
	case t.After(e.Now):
		e.Reason = bustype.RewindAfterEnd
	case e.FirstSequence > 0 && t.Before(e.FirstAppendedAt):
		e.Reason = bustype.RewindBeforeStart
	case markAt == nil || *through < trimmed:
		e.Reason = bustype.RewindNotExact
	default:
		return *through, *markAt, nil
	}
	return 0, time.Time{}, e
}

// resetReplay resets pool name to the position that position returns,
// called in the reset's transaction with where the log begins.
func resetReplay(ctx context.Context, db database.DB, name string,
	position func(tx pgx.Tx, trimmed int64) (to int64, markAt time.Time, _ error)) (*Replay, error) {
	var replay *Replay
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Retention waits while the cursor moves back, and the cursor never
		// goes below where the log begins: 0 (the beginning) is the oldest
		// retained event, anything else below it is refused (docs/design.md §8).
		trimmed, err := retention.StartFloor(ctx, tx, "pool reset")
		if err != nil {
			return err
		}
		to, markAt, err := position(tx, trimmed)
		if err != nil {
			return err
		}
		if err := lockPool(ctx, tx, "pool reset", name); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlPoolReset, name, to)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 { // the row is locked: only the end of the log refuses
			return beyondLogError(ctx, tx, "reset position", to)
		}
		if _, err := tx.Exec(ctx, sqlPoolStartSet, name, to); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlCheckpointReset, name, to); err != nil {
			return err
		}
		replay = &Replay{After: to, MarkAt: markAt}
		if err := tx.QueryRow(ctx, sqlResetReplay).Scan(&replay.Through, &replay.JobsAfter); err != nil {
			return fmt.Errorf("read where the replay ends: %w", err)
		}
		replay.Pool, err = get(ctx, tx, name, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reset pool %q: %w", name, err)
	}
	return replay, nil
}

// beyondLogError is the *bustype.StartBeyondLogError for a start point a
// statement refused, saying where the log ends.
func beyondLogError(ctx context.Context, tx pgx.Tx, what string, position int64) error {
	e := &bustype.StartBeyondLogError{What: what, Position: position}
	if err := tx.QueryRow(ctx, sqlLogEndParts).Scan(&e.LastSequence, &e.Horizon); err != nil {
		return fmt.Errorf("read where the log ends: %w", err)
	}
	return e
}

// EventTypesAbsent returns those of types no event in the log has (none
// appended yet, or retention deleted them all), in order: a pool filtered
// on such a type is most likely a typo. One index probe per type.
func EventTypesAbsent(ctx context.Context, db database.DB, types []string) ([]string, error) {
	if len(types) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, sqlEventTypesAbsent, types)
	if err != nil {
		return nil, fmt.Errorf("look up event types: %w", err)
	}
	absent, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up event types: %w", err)
	}
	return absent, nil
}

// Delete deletes a pool. With unfinished jobs (available, scheduled,
// retryable, pending or running) it refuses with bustype.ErrPoolBusy unless force is
// set; with force, the pool's jobs that are not running and its dead
// letters are deleted with it (running ones finish on their own).
func Delete(ctx context.Context, db database.DB, name string, force bool) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := lockPool(ctx, tx, "pool delete", name); err != nil {
			return err
		}
		var unfinished int64
		if err := tx.QueryRow(ctx, sqlPoolUnfinishedJobs, name).Scan(&unfinished); err != nil {
			return err
		}
		if unfinished > 0 && !force {
			return fmt.Errorf("%w: %d job(s) not finished; wait for them, or delete it with force, which deletes its waiting jobs and dead letters too", bustype.ErrPoolBusy, unfinished)
		}
		if force {
			if _, err := tx.Exec(ctx, sqlPoolDeleteJobs, name); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sqlPoolDelete, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete pool %q: %w", name, err)
	}
	return nil
}
