package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverbus/riverbus/outbox"
)

// Pool statuses.
const (
	PoolActive = "active"
	PoolPaused = "paused"
)

// Pool orderings: how a pool's jobs may overtake each other.
const (
	// OrderingNone: jobs run in parallel in whatever order River fetches
	// them, retries included.
	OrderingNone = "none"
	// OrderingKey: jobs with the same event key run one at a time in
	// global-sequence order; different keys run in parallel.
	OrderingKey = "key"
	// OrderingGlobal: the whole pool runs one job at a time in
	// global-sequence order.
	OrderingGlobal = "global"
)

// What a dead letter does to its lane in an ordered pool.
const (
	// DeadLetterRelease: the next job of the key runs (the dead letter is
	// kept, logged and counted).
	DeadLetterRelease = "release"
	// DeadLetterBlock: the key waits until an operator retries or purges
	// the dead letter.
	DeadLetterBlock = "block"
)

// Pool groupings.
const (
	// GroupNone: one job per event.
	GroupNone = "none"
	// GroupTransaction: the events one application transaction appended
	// (and, in a key-ordered pool, with the same key) become one job.
	GroupTransaction = "transaction"
)

// Pool defaults.
const (
	MaxAttemptsDefault = 25
	PriorityDefault    = 1
)

var (
	// ErrUnknownPool is returned for a pool name that does not exist. The
	// error it comes wrapped in lists the pools that do.
	ErrUnknownPool = errors.New("unknown pool")

	// ErrPoolExists is returned by CreatePool when the pool exists with
	// other settings and PoolParams.Update is false.
	ErrPoolExists = errors.New("pool exists with other settings")

	// ErrInvalidPool is returned for pool settings that are not valid.
	ErrInvalidPool = errors.New("invalid pool")
)

// poolNameRE is River's rule for a job kind, narrowed to what is safe in SQL,
// URLs and the UI.
var (
	poolNameRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{1,99}$`)
	queueNameRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)
	tagRE       = regexp.MustCompile(`^[^=]+=`)
)

// Pool is a named consumer group: every event that matches its filter
// becomes exactly one River job of kind Name.
type Pool struct {
	Name        string   `json:"name"`
	Queue       string   `json:"queue"`
	EventTypes  []string `json:"event_types"` // empty: every type
	Tags        []string `json:"tags"`        // every listed name=value tag must be on the event
	MaxAttempts int      `json:"max_attempts"`
	Priority    int      `json:"priority"`
	// StartAfter: events with a higher global sequence are delivered.
	StartAfter int64  `json:"start_after"`
	Status     string `json:"status"`
	// Ordering is OrderingNone, OrderingKey or OrderingGlobal.
	Ordering string `json:"ordering"`
	// OnDeadLetter is DeadLetterRelease or DeadLetterBlock.
	OnDeadLetter string `json:"on_dead_letter"`
	// Grouping is GroupNone or GroupTransaction.
	Grouping string `json:"grouping"`
	// Cursor: every event <= Cursor has been turned into a job or filtered out.
	Cursor int64 `json:"cursor"`
	// Checkpoint: every job of the pool for an event <= Checkpoint is finished.
	Checkpoint          int64     `json:"checkpoint"`
	EventsFannedOut     int64     `json:"events_fanned_out"`
	LateEventsDelivered int64     `json:"late_events_delivered"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// StartPosition says where a new pool starts: from the beginning of the log,
// from now (events appended after the pool is created), or after a given
// global sequence.
type StartPosition struct {
	kind  string // "", "beginning", "now", "after"
	after int64
}

// Start positions.
var (
	FromBeginning = StartPosition{kind: "beginning"}
	FromNow       = StartPosition{kind: "now"}
)

// FromSequence starts a pool after sequence seq: the first event delivered is
// the first one above seq.
func FromSequence(seq int64) StartPosition { return StartPosition{kind: "after", after: seq} }

// ParseStartPosition parses "beginning", "now" or a non-negative sequence
// number.
func ParseStartPosition(s string) (StartPosition, error) {
	switch s {
	case "beginning", "":
		return FromBeginning, nil
	case "now":
		return FromNow, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return StartPosition{}, fmt.Errorf("%w: start position must be beginning, now or a sequence number >= 0, got %q", ErrInvalidPool, s)
	}
	return FromSequence(n), nil
}

func (p StartPosition) String() string {
	if p.kind == "after" {
		return strconv.FormatInt(p.after, 10)
	}
	return cmp.Or(p.kind, "beginning")
}

// PoolParams are the settings of CreatePool.
type PoolParams struct {
	// Name is the pool name and the River job kind: letters, digits and
	// _ . - : only, starting with a letter, digit or _, 2 to 100 chars (River
	// refuses a one-character job kind).
	Name string
	// Queue is the River queue of the pool's jobs. Empty: derived from the
	// name (lower case, other characters turned into _), e.g. "Billing.v2"
	// → "billing_v2".
	Queue string
	// EventTypes filters by event type; empty means every type.
	EventTypes []string
	// Tags filters by tags (name=value); an event must carry all of them.
	Tags []string
	// MaxAttempts of each job. Zero: MaxAttemptsDefault.
	MaxAttempts int
	// Priority of each job, 1 (highest) to 4. Zero: PriorityDefault.
	Priority int
	// Ordering is OrderingNone (default), OrderingKey or OrderingGlobal.
	Ordering string
	// OnDeadLetter is DeadLetterRelease (default) or DeadLetterBlock; it
	// matters only for ordered pools.
	OnDeadLetter string
	// Grouping is GroupNone (default) or GroupTransaction.
	Grouping string
	// From is where a new pool starts. Zero value: the beginning. Ignored
	// when the pool already exists.
	From StartPosition
	// Update lets CreatePool change the settings of an existing pool.
	Update bool
}

// DefaultQueue returns the queue a pool named name gets when none is given.
func DefaultQueue(name string) string {
	var b strings.Builder
	lastUnderscore := true
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			lastUnderscore = false
		} else if !lastUnderscore {
			b.WriteByte('_')
			lastUnderscore = true
		}
	}
	q := strings.Trim(b.String(), "_")
	if len(q) > 64 {
		q = strings.Trim(q[:64], "_")
	}
	return cmp.Or(q, "default")
}

func (p *PoolParams) normalize() error {
	if !poolNameRE.MatchString(p.Name) {
		return fmt.Errorf("%w: name %q must be 2-100 letters, digits, _ . - or :, starting with a letter, digit or _ (River job kinds have at least two characters)", ErrInvalidPool, p.Name)
	}
	if p.Queue == "" {
		p.Queue = DefaultQueue(p.Name)
	}
	if len(p.Queue) > 64 || !queueNameRE.MatchString(p.Queue) {
		return fmt.Errorf("%w: queue %q must be lower-case letters and digits separated by _ or -, at most 64 chars", ErrInvalidPool, p.Queue)
	}
	for _, typ := range p.EventTypes {
		if typ == "" || len([]rune(typ)) > 255 {
			return fmt.Errorf("%w: event type filter %q must be 1-255 characters", ErrInvalidPool, typ)
		}
	}
	for _, tag := range p.Tags {
		if !tagRE.MatchString(tag) {
			return fmt.Errorf("%w: tag filter %q must be name=value", ErrInvalidPool, tag)
		}
	}
	p.EventTypes = sortedUnique(p.EventTypes)
	p.Tags = sortedUnique(p.Tags)
	if p.MaxAttempts == 0 {
		p.MaxAttempts = MaxAttemptsDefault
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > 1000 {
		return fmt.Errorf("%w: max attempts must be between 1 and 1000, got %d", ErrInvalidPool, p.MaxAttempts)
	}
	if p.Priority == 0 {
		p.Priority = PriorityDefault
	}
	if p.Priority < 1 || p.Priority > 4 {
		return fmt.Errorf("%w: priority must be between 1 and 4, got %d", ErrInvalidPool, p.Priority)
	}
	p.Ordering = cmp.Or(p.Ordering, OrderingNone)
	if p.Ordering != OrderingNone && p.Ordering != OrderingKey && p.Ordering != OrderingGlobal {
		return fmt.Errorf("%w: ordering must be none, key or global, got %q", ErrInvalidPool, p.Ordering)
	}
	p.OnDeadLetter = cmp.Or(p.OnDeadLetter, DeadLetterRelease)
	if p.OnDeadLetter != DeadLetterRelease && p.OnDeadLetter != DeadLetterBlock {
		return fmt.Errorf("%w: on dead letter must be release or block, got %q", ErrInvalidPool, p.OnDeadLetter)
	}
	p.Grouping = cmp.Or(p.Grouping, GroupNone)
	if p.Grouping != GroupNone && p.Grouping != GroupTransaction {
		return fmt.Errorf("%w: grouping must be none or transaction, got %q", ErrInvalidPool, p.Grouping)
	}
	if p.From.kind == "after" && p.From.after < 0 {
		return fmt.Errorf("%w: start sequence must be >= 0, got %d", ErrInvalidPool, p.From.after)
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

// DB is what the pool functions need: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CreatePool creates a pool and reports whether it was created. A pool that
// exists with the same settings is left alone; with other settings it is an
// ErrPoolExists error unless params.Update is set, which changes them (the
// start position and cursor of an existing pool never change here).
func CreatePool(ctx context.Context, db DB, params PoolParams) (*Pool, bool, error) {
	if err := params.normalize(); err != nil {
		return nil, false, err
	}
	var (
		pool    *Pool
		created bool
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var startAfter int64
		switch params.From.kind {
		case "after":
			startAfter = params.From.after
		case "now":
			// Every sequence handed out so far is before "now".
			if err := tx.QueryRow(ctx, sqlLastSequence).Scan(&startAfter); err != nil {
				return fmt.Errorf("read last sequence: %w", err)
			}
		}
		rows, err := tx.Query(ctx, sqlPoolInsert, params.Name, params.Queue, params.EventTypes, params.Tags,
			params.MaxAttempts, params.Priority, startAfter, params.Ordering, params.OnDeadLetter, params.Grouping)
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
		existing, err := getPool(ctx, tx, params.Name, true)
		if err != nil {
			return err
		}
		if sameSettings(existing, &params) {
			pool = existing
			return nil
		}
		if !params.Update {
			return fmt.Errorf("%w: pool %q has queue=%s types=%v tags=%v max_attempts=%d priority=%d ordering=%s on_dead_letter=%s grouping=%s; pass Update (--update) to change them",
				ErrPoolExists, existing.Name, existing.Queue, existing.EventTypes, existing.Tags, existing.MaxAttempts, existing.Priority,
				existing.Ordering, existing.OnDeadLetter, existing.Grouping)
		}
		pool, err = collectOne(tx.Query(ctx, sqlPoolUpdate, params.Name, params.Queue, params.EventTypes, params.Tags,
			params.MaxAttempts, params.Priority, params.Ordering, params.OnDeadLetter, params.Grouping))
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
func sameDelivery(p *Pool, params *PoolParams) bool {
	return slices.Equal(p.EventTypes, params.EventTypes) && slices.Equal(p.Tags, params.Tags) &&
		p.Ordering == params.Ordering && p.Grouping == params.Grouping
}

func sameSettings(p *Pool, params *PoolParams) bool {
	return p.Queue == params.Queue && slices.Equal(p.EventTypes, params.EventTypes) &&
		slices.Equal(p.Tags, params.Tags) && p.MaxAttempts == params.MaxAttempts && p.Priority == params.Priority &&
		p.Ordering == params.Ordering && p.OnDeadLetter == params.OnDeadLetter && p.Grouping == params.Grouping
}

// GetPool returns one pool, or an error wrapping ErrUnknownPool that lists
// the pools that exist.
func GetPool(ctx context.Context, db DB, name string) (*Pool, error) {
	return getPool(ctx, db, name, false)
}

func getPool(ctx context.Context, db DB, name string, forUpdate bool) (*Pool, error) {
	q := sqlPoolGet
	if forUpdate {
		q = sqlPoolGetForUpdate
	}
	pool, err := collectOne(db.Query(ctx, q, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, UnknownPoolError(ctx, db, name)
	}
	return pool, err
}

// UnknownPoolError builds the ErrUnknownPool error for name, listing the
// pools that exist.
func UnknownPoolError(ctx context.Context, db DB, name string) error {
	pools, err := ListPools(ctx, db)
	if err != nil {
		return fmt.Errorf("%w %q", ErrUnknownPool, name)
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name
	}
	if len(names) == 0 {
		return fmt.Errorf("%w %q: no pools exist yet (create one with `riverbus pool create`)", ErrUnknownPool, name)
	}
	return fmt.Errorf("%w %q: pools are %s", ErrUnknownPool, name, strings.Join(names, ", "))
}

// ListPools returns every pool, by name.
func ListPools(ctx context.Context, db DB) ([]*Pool, error) {
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

// SetPoolStatus pauses (PoolPaused) or resumes (PoolActive) a pool: its
// fan-out, and, when no other pool shares its River queue, its handlers too
// (River's queue pause: workers finish the jobs they hold and fetch no
// more). Nothing is lost: a paused pool's cursor and jobs stay where they
// are. sharedQueue reports that the queue is shared, so the handlers were
// left running.
func SetPoolStatus(ctx context.Context, db DB, name, status string) (pool *Pool, sharedQueue bool, err error) {
	if status != PoolActive && status != PoolPaused {
		return nil, false, fmt.Errorf("%w: status must be %s or %s, got %q", ErrInvalidPool, PoolActive, PoolPaused, status)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		pool, err = collectOne(tx.Query(ctx, sqlPoolSetStatus, name, status))
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
		if _, err := tx.Exec(ctx, sqlRiverQueueEnsure, pool.Queue); err != nil {
			return fmt.Errorf("river queue: %w", err)
		}
		rc, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
		if err != nil {
			return err
		}
		if status == PoolPaused {
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
		return nil, false, UnknownPoolError(ctx, db, name)
	}
	if err != nil {
		return nil, false, fmt.Errorf("set pool %q %s: %w", name, status, err)
	}
	return pool, sharedQueue, nil
}

func collectOne(rows pgx.Rows, err error) (*Pool, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectExactlyOneRow(rows, scanPool)
}

func scanPool(row pgx.CollectableRow) (*Pool, error) {
	var p Pool
	var maxAttempts, priority int16
	err := row.Scan(&p.Name, &p.Queue, &p.EventTypes, &p.Tags, &maxAttempts, &priority, &p.StartAfter, &p.Status,
		&p.Ordering, &p.OnDeadLetter, &p.Grouping,
		&p.Cursor, &p.Checkpoint, &p.EventsFannedOut, &p.LateEventsDelivered, &p.CreatedAt, &p.UpdatedAt)
	p.MaxAttempts, p.Priority = int(maxAttempts), int(priority)
	return &p, err
}

func translatePoolErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23514" {
		return fmt.Errorf("%w: %s", ErrInvalidPool, pgErr.ConstraintName)
	}
	return err
}

// ErrPoolBusy is returned by DeletePool for a pool with unfinished jobs when
// force is not set.
var ErrPoolBusy = errors.New("pool has unfinished jobs")

// ResetPool moves a pool's cursor to after sequence to, so every event above
// it is fanned out again (rebuilding a projection from history), and sets
// its checkpoint to the same place. It waits for a fan-out batch of the pool
// in flight to finish. Jobs already created are left alone.
func ResetPool(ctx context.Context, db DB, name string, to int64) (*Pool, error) {
	if to < 0 {
		return nil, fmt.Errorf("%w: reset position must be >= 0, got %d", ErrInvalidPool, to)
	}
	var pool *Pool
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := getPool(ctx, tx, name, true); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlPoolReset, name, to); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlPoolStartSet, name, to); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlCheckpointReset, name, to); err != nil {
			return err
		}
		var err error
		pool, err = getPool(ctx, tx, name, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reset pool %q: %w", name, err)
	}
	return pool, nil
}

// DeletePool deletes a pool. With unfinished jobs (available, scheduled,
// retryable, pending or running) it refuses with ErrPoolBusy unless force is
// set; with force, the pool's jobs that are not running and its dead
// letters are deleted with it (running ones finish on their own).
func DeletePool(ctx context.Context, db DB, name string, force bool) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := getPool(ctx, tx, name, true); err != nil {
			return err
		}
		var unfinished int64
		if err := tx.QueryRow(ctx, sqlPoolUnfinishedJobs, name).Scan(&unfinished); err != nil {
			return err
		}
		if unfinished > 0 && !force {
			return fmt.Errorf("%w: %d job(s) not finished; wait for them, or pass --force to delete the pool with its waiting jobs and dead letters", ErrPoolBusy, unfinished)
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

// Matches reports whether the pool's type and tag filters let e through.
func (p *Pool) Matches(e outbox.Event) bool { return filterMatches(p.EventTypes, p.Tags, e) }

func filterMatches(types, tags []string, e outbox.Event) bool {
	if len(types) > 0 && !slices.Contains(types, e.Type) {
		return false
	}
	for _, t := range tags {
		if !slices.Contains(e.Tags, t) {
			return false
		}
	}
	return true
}
