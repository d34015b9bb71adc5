package bustype

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PoolStatus says whether a pool is fanned out.
type PoolStatus string

// Pool statuses.
const (
	// PoolActive: the pool's events become jobs.
	PoolActive PoolStatus = "active"
	// PoolPaused: the pool's cursor stays where it is; when no other pool
	// shares its River queue, its handlers stop fetching too.
	PoolPaused PoolStatus = "paused"
)

// Valid reports whether s is a known status.
func (s PoolStatus) Valid() bool { return s == PoolActive || s == PoolPaused }

// Ordering says how a pool's jobs may overtake each other.
type Ordering string

// Pool orderings.
const (
	// OrderingNone: jobs run in parallel in whatever order River fetches
	// them, retries included.
	OrderingNone Ordering = "none"
	// OrderingKey: jobs with the same event key run one at a time in
	// global-sequence order; different keys run in parallel.
	OrderingKey Ordering = "key"
	// OrderingGlobal: the whole pool runs one job at a time in
	// global-sequence order.
	OrderingGlobal Ordering = "global"
)

// Valid reports whether o is a known ordering.
func (o Ordering) Valid() bool { return o == OrderingNone || o == OrderingKey || o == OrderingGlobal }

// Ordered reports whether the pool's jobs run in lanes (key or global).
func (o Ordering) Ordered() bool { return o == OrderingKey || o == OrderingGlobal }

// ParseOrdering parses "none", "key" or "global"; empty is OrderingNone.
func ParseOrdering(s string) (Ordering, error) {
	o := cmp.Or(Ordering(s), OrderingNone)
	if !o.Valid() {
		return "", fmt.Errorf("%w: ordering must be none, key or global, got %q", ErrInvalidPool, s)
	}
	return o, nil
}

// DeadLetterPolicy says what a dead letter does to its lane in an ordered
// pool.
type DeadLetterPolicy string

// Dead-letter policies.
const (
	// DeadLetterRelease: the next job of the key runs (the dead letter is
	// kept, logged and counted).
	DeadLetterRelease DeadLetterPolicy = "release"
	// DeadLetterBlock: the key waits until an operator retries or purges
	// the dead letter.
	DeadLetterBlock DeadLetterPolicy = "block"
)

// Valid reports whether d is a known policy.
func (d DeadLetterPolicy) Valid() bool { return d == DeadLetterRelease || d == DeadLetterBlock }

// ParseDeadLetterPolicy parses "release" or "block"; empty is
// DeadLetterRelease.
func ParseDeadLetterPolicy(s string) (DeadLetterPolicy, error) {
	d := cmp.Or(DeadLetterPolicy(s), DeadLetterRelease)
	if !d.Valid() {
		return "", fmt.Errorf("%w: on dead letter must be release or block, got %q", ErrInvalidPool, s)
	}
	return d, nil
}

// Grouping says what one job of a pool holds.
type Grouping string

// Pool groupings.
const (
	// GroupNone: one job per event.
	GroupNone Grouping = "none"
	// GroupTransaction: the events one application transaction appended
	// (and, in a key-ordered pool, with the same key) become one job.
	GroupTransaction Grouping = "transaction"
)

// Valid reports whether g is a known grouping.
func (g Grouping) Valid() bool { return g == GroupNone || g == GroupTransaction }

// ParseGrouping parses "none" or "transaction"; empty is GroupNone.
func ParseGrouping(s string) (Grouping, error) {
	g := cmp.Or(Grouping(s), GroupNone)
	if !g.Valid() {
		return "", fmt.Errorf("%w: grouping must be none or transaction, got %q", ErrInvalidPool, s)
	}
	return g, nil
}

// Pool defaults.
const (
	MaxAttemptsDefault = 25
	PriorityDefault    = 1
)

// Pool is a named consumer group: every event that matches its filter
// becomes exactly one River job of kind Name, in River queue Queue.
type Pool struct {
	Name        string   `json:"name"`
	Queue       string   `json:"queue"`
	EventTypes  []string `json:"event_types"` // empty: every type
	Tags        []string `json:"tags"`        // every listed name=value tag must be on the event
	MaxAttempts int      `json:"max_attempts"`
	Priority    int      `json:"priority"`
	// StartAfter: events with a higher global sequence are delivered.
	StartAfter   int64            `json:"start_after"`
	Status       PoolStatus       `json:"status"`
	Ordering     Ordering         `json:"ordering"`
	OnDeadLetter DeadLetterPolicy `json:"on_dead_letter"`
	Grouping     Grouping         `json:"grouping"`
	// Retry is when a failed job of the pool is attempted again.
	Retry RetrySchedule `json:"retry"`
	// Cursor: every event <= Cursor has been turned into a job or filtered out.
	Cursor int64 `json:"cursor"`
	// Checkpoint: every job of the pool for an event <= Checkpoint is finished.
	Checkpoint          int64     `json:"checkpoint"`
	EventsFannedOut     int64     `json:"events_fanned_out"`
	LateEventsDelivered int64     `json:"late_events_delivered"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
}

// Matches reports whether the pool's type and tag filters let an event of
// type eventType with tags eventTags through.
func (p *Pool) Matches(eventType string, eventTags []string) bool {
	return FilterMatches(p.EventTypes, p.Tags, eventType, eventTags)
}

// FilterMatches reports whether an event of type eventType with tags
// eventTags passes a filter of types (empty: any) and tags (every one must
// be on the event).
func FilterMatches(types, tags []string, eventType string, eventTags []string) bool {
	if len(types) > 0 && !slices.Contains(types, eventType) {
		return false
	}
	for _, t := range tags {
		if !slices.Contains(eventTags, t) {
			return false
		}
	}
	return true
}

// DefaultQueue returns the River queue of a pool named name when none is
// given: lower case, every run of other characters turned into one _, at
// most 64 characters ("Billing.v2" → "billing_v2").
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

// StartPosition says where a new pool starts: from the beginning of the log,
// from now (events appended after the pool is created), or after a given
// global sequence. The zero value is the beginning.
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

// IsNow reports whether p is FromNow.
func (p StartPosition) IsNow() bool { return p.kind == "now" }

// After returns the sequence p starts after and true, or false when p is
// the beginning or now.
func (p StartPosition) After() (int64, bool) { return p.after, p.kind == "after" }

func (p StartPosition) String() string {
	if p.kind == "after" {
		return strconv.FormatInt(p.after, 10)
	}
	return cmp.Or(p.kind, "beginning")
}

// PoolParams are the settings of a new pool, as riverbus's Client.PoolCreate
// takes them (PoolUpdate changes an existing pool's).
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
	Ordering Ordering
	// OnDeadLetter is DeadLetterRelease (default) or DeadLetterBlock; it
	// matters only for ordered pools.
	OnDeadLetter DeadLetterPolicy
	// Grouping is GroupNone (default) or GroupTransaction.
	Grouping Grouping
	// Retry is when a failed job is attempted again. Zero fields: the
	// defaults (RetryScheduleDefault); Retry.Jitter -1: no jitter.
	Retry RetrySchedule
	// From is where a new pool starts. Zero value: the beginning, which
	// after event retention is the oldest retained event; a sequence below
	// where the log begins is refused. Ignored when the pool already
	// exists.
	From StartPosition
	// Update lets the creation change the settings of an existing pool
	// instead of refusing them. Client.PoolCreate ignores it: use
	// Client.PoolUpdate.
	Update bool
}
