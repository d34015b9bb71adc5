package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/riverbus/riverbus/internal/database"
)

// QueryItem selects events by type and tags. An event matches when its type
// is one of Types (any type when Types is empty) and its tags contain every
// tag of Tags. An item needs at least one type or tag.
type QueryItem struct {
	Types []string
	Tags  []string
}

// Query selects the events that match any of its items.
type Query []QueryItem

// AppendCondition is the condition of a conditional append (AppendIfTx), in
// the manner of Dynamic Consistency Boundaries: the caller read the events
// of a query up to a position, decided, and appends only if no event of that
// query was appended since.
type AppendCondition struct {
	// FailIfEventsMatch makes the append fail with *ConflictError when an
	// event matching it has a sequence above After. Empty means no such
	// check.
	FailIfEventsMatch Query
	// After is the position the caller's decision was made at: usually the
	// GlobalSequence of the last event Read returned for FailIfEventsMatch,
	// or zero when there was none.
	//
	// A position is a sequence number, and sequences are assigned at insert
	// but become visible at commit: an event of a transaction still open
	// during the caller's Read can commit later with a sequence below After,
	// and is then not a conflict. That takes two transactions appending
	// events of the caller's query at the same time without excluding each
	// other: plain appends, or conditional appends whose conditions do not
	// cover each other's events. Appenders whose conditions cover the query
	// (see AppendIfTx) commit in sequence order, and cannot cause it.
	After int64
	// IdempotencyQuery makes the append fail with *DuplicateError when any
	// event at all matches it, typically a tag unique to the command, such
	// as "idempotency=<request id>", carried by the appended events. Empty
	// means no such check.
	//
	// A condition needs items in FailIfEventsMatch, IdempotencyQuery or both.
	IdempotencyQuery Query
	// LockTimeout bounds the wait for the locks of conditional appenders
	// whose conditions or events overlap this one's (they hold them until
	// their transactions end). A wait that runs out fails with
	// *database.LockWaitError (SQLSTATE 55P03 underneath), naming the
	// sessions that held them. Zero means 5 s.
	LockTimeout time.Duration
}

// AppendIfTx appends events inside the caller's transaction if cond holds,
// and returns their sequences and ids in input order like AppendTx.
//
// It fails with *DuplicateError (ErrDuplicate) when an event matches
// cond.IdempotencyQuery, else with *ConflictError (ErrConflict) when an event
// matching cond.FailIfEventsMatch has a sequence above cond.After; nothing is
// appended then and tx stays usable. Invalid events or an invalid condition
// return *ValidationError (ErrInvalidEvent) before any SQL.
//
// Conditional appenders are serialized against each other: before checking,
// AppendIfTx takes transaction-level locks, exclusive on every tag of the
// condition's items (on the types of an item without tags) and shared on the
// tags and type of every appended event, in one global order. They are row
// locks of a table only riverbus's roles can reach, taken through a function
// granted to riverbus_app and riverbus_worker (migration 018): a login
// without those roles can neither take nor hold them, as it could the
// advisory locks they replaced. So two conditional appends whose events
// could match each other's condition run one after the other, and the second sees the first's events; appends that
// cannot affect each other do not wait. The locks are held until tx ends,
// which makes a conditional append the last thing a transaction should do
// before committing. Two conditional appends in one transaction take their
// locks in two rounds, so two such transactions can deadlock; PostgreSQL
// then fails one with SQLSTATE 40P01, safe to retry.
//
// Plain appends (Append, AppendTx, SQL) take no locks: a decision protected
// by a condition must have every event that can invalidate it appended with
// AppendIf or AppendIfTx.
//
// The check needs READ COMMITTED (PostgreSQL's default) or SERIALIZABLE
// isolation: under READ COMMITTED it starts after the locks are held and so
// sees every event committed before; under SERIALIZABLE a losing concurrent
// appender may instead fail with a serialization failure (SQLSTATE 40001),
// safe to retry. REPEATABLE READ is refused, since its snapshot could hide
// the events of the appender that held the locks.
func AppendIfTx(ctx context.Context, tx pgx.Tx, cond AppendCondition, events ...Event) ([]Appended, error) {
	if err := validateEvents(events); err != nil {
		return nil, err
	}
	if err := validateCondition(cond); err != nil {
		return nil, err
	}
	ctx, span := startAppend(ctx, "AppendIfTx", len(events))
	appended, err := appendIfTx(ctx, tx, cond, events, span)
	span.end(appended, err)
	return appended, err
}

// AppendIf is AppendIfTx in a transaction of its own, committed when the
// condition holds and rolled back otherwise.
func AppendIf(ctx context.Context, db TxBeginner, cond AppendCondition, events ...Event) ([]Appended, error) {
	if err := validateEvents(events); err != nil {
		return nil, err
	}
	if err := validateCondition(cond); err != nil {
		return nil, err
	}
	ctx, span := startAppend(ctx, "AppendIf", len(events))
	var appended []Appended
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		appended, err = appendIfTx(ctx, tx, cond, events, span)
		return err
	})
	span.end(appended, err)
	return appended, err
}

// appendIfTx is AppendIfTx for a validated condition and events: the locks
// and the conditional insert, two statements sent in one round trip.
func appendIfTx(ctx context.Context, tx pgx.Tx, cond AppendCondition, events []Event, span *appendSpan) ([]Appended, error) {
	payload, ids, err := encodeEvents(events, span)
	if err != nil {
		return nil, err
	}
	keys, exclusive := lockKeys(cond, events)
	conflictTypes, conflictItems, err := splitQuery(cond.FailIfEventsMatch)
	if err != nil {
		return nil, err
	}
	duplicateTypes, duplicateItems, err := splitQuery(cond.IdempotencyQuery)
	if err != nil {
		return nil, err
	}

	var (
		conflict, duplicate *int64
		isolation           string
		returned            []Appended
	)
	timeout := cmp.Or(cond.LockTimeout, database.LockTimeoutDefault)
	// One round trip: bound the lock wait, lock, check and insert, put the
	// transaction's lock_timeout back.
	batch := &pgx.Batch{}
	batch.Queue(database.SQLLockTimeoutSet, database.LockTimeoutSetting(timeout))
	batch.Queue(lockQuery, keys, exclusive)
	batch.Queue(appendIfQuery, payload, conflictTypes, conflictItems, cond.After, duplicateTypes, duplicateItems)
	batch.Queue(database.SQLLockTimeoutRestore)
	conn := tx.Conn()
	err = database.WaitLock(ctx, conn.Config, conn.PgConn().PID(), "append if: lock append condition", timeout, func() error {
		results := tx.SendBatch(ctx, batch)
		defer results.Close()
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("append if: %w", err)
		}
		if _, err := results.Exec(); err != nil {
			if database.IsCode(err, pgerrcode.LockNotAvailable) {
				return err // named by WaitLock
			}
			return fmt.Errorf("lock append condition: %w", err)
		}
		rows, err := results.Query()
		if err != nil {
			return fmt.Errorf("append events if: %w", translateError(err))
		}
		for rows.Next() {
			var seq *int64
			var id *uuid.UUID
			if err := rows.Scan(&conflict, &duplicate, &isolation, &seq, &id); err != nil {
				rows.Close()
				return fmt.Errorf("append events if: %w", err)
			}
			if seq != nil && id != nil {
				returned = append(returned, Appended{GlobalSequence: *seq, EventID: *id})
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("append events if: %w", translateError(err))
		}
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("append if: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case duplicate != nil:
		return nil, &DuplicateError{Query: cond.IdempotencyQuery, GlobalSequence: *duplicate}
	case conflict != nil:
		return nil, &ConflictError{Query: cond.FailIfEventsMatch, After: cond.After, GlobalSequence: *conflict}
	case len(returned) == 0:
		return nil, fmt.Errorf("outbox: AppendIfTx needs READ COMMITTED or SERIALIZABLE isolation, the transaction is %s", isolation)
	}
	return inInputOrder(ids, returned)
}

// wireItem is the JSON form of a query item with tags; see queries.go.
type wireItem struct {
	Types []string `json:"types"`
	Tags  []string `json:"tags"`
}

// splitQuery splits q for the SQL of this package: the types of the items
// without tags, de-duplicated, and the items with tags as a jsonb array.
func splitQuery(q Query) ([]string, string, error) {
	types := []string{}
	var tagged Query
	for _, item := range q {
		if len(item.Tags) > 0 {
			tagged = append(tagged, item)
			continue
		}
		for _, t := range item.Types {
			if !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	items, err := encodeItems(tagged)
	return types, items, err
}

// encodeItems returns the items of q as a jsonb array of {"types": [...],
// "tags": [...]}, as a string like encodeEvents.
func encodeItems(q Query) (string, error) {
	items := make([]wireItem, len(q))
	for i, item := range q {
		items[i] = wireItem{Types: item.Types, Tags: item.Tags}
		if items[i].Types == nil {
			items[i].Types = []string{}
		}
		if items[i].Tags == nil {
			items[i].Tags = []string{}
		}
	}
	encoded, err := json.Marshal(items)
	if err != nil {
		return "", fmt.Errorf("encode query: %w", err)
	}
	return string(encoded), nil
}

// lockKeys returns the lock keys of a conditional append, sorted
// and de-duplicated, and for each whether it is taken exclusive.
//
// An event matching an item with tags carries every tag of the item; an
// event matching an item without tags has one of its types. So locking each
// tag of each condition item (or each type, for an item without tags)
// exclusive, and each tag and the type of each appended event shared, gives
// any two appenders of which one could append an event matching the other's
// condition a common key that at least one of them holds exclusive.
func lockKeys(cond AppendCondition, events []Event) ([]int64, []bool) {
	modes := make(map[int64]bool)
	for _, q := range []Query{cond.FailIfEventsMatch, cond.IdempotencyQuery} {
		for _, item := range q {
			for _, tag := range item.Tags {
				modes[tagLockKey(tag)] = true
			}
			if len(item.Tags) == 0 {
				for _, t := range item.Types {
					modes[typeLockKey(t)] = true
				}
			}
		}
	}
	for _, e := range events {
		for _, tag := range e.Tags {
			if k := tagLockKey(tag); !modes[k] {
				modes[k] = false
			}
		}
		if k := typeLockKey(e.Type); !modes[k] {
			modes[k] = false
		}
	}
	keys := make([]int64, 0, len(modes))
	for k := range modes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	exclusive := make([]bool, len(keys))
	for i, k := range keys {
		exclusive[i] = modes[k]
	}
	return keys, exclusive
}

// tagLockKey and typeLockKey are 64-bit FNV-1a hashes, in separate name
// spaces so that a tag and a type never share a key by construction.
func tagLockKey(tag string) int64 { return lockKey("riverbus.outbox.tag\x00" + tag) }

func typeLockKey(typ string) int64 { return lockKey("riverbus.outbox.type\x00" + typ) }

func lockKey(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64())
}
