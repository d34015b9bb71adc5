package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TxBeginner begins a transaction. *pgxpool.Pool, *pgx.Conn and pgx.Tx (a
// savepoint) satisfy it.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Appended is what the database assigned to one appended event.
type Appended struct {
	// GlobalSequence is the event's position in the total order of events.
	GlobalSequence int64
	// EventID is the event's id: the caller's, or the UUIDv7 generated for
	// an event whose EventID was zero.
	EventID uuid.UUID
}

// AppendTx appends events inside the caller's transaction, in one statement,
// and returns their sequences and ids in input order. The events become
// visible, and are fanned out, when tx commits; if tx rolls back, their
// sequences are never used (a gap the fan-out skips).
//
// The events are validated first: on a *ValidationError (ErrInvalidEvent)
// no SQL has run. An EventID that already exists returns *DuplicateError
// (ErrDuplicate); after any database error tx is aborted and must be rolled
// back.
func AppendTx(ctx context.Context, tx pgx.Tx, events ...Event) ([]Appended, error) {
	if err := validateEvents(events); err != nil {
		return nil, err
	}
	ctx, span := startAppend(ctx, "AppendTx", len(events))
	appended, err := appendTx(ctx, tx, events, span)
	span.end(appended, err)
	return appended, err
}

// appendTx is AppendTx for validated events; span (nil when untraced)
// adds its trace context to their metadata.
func appendTx(ctx context.Context, tx pgx.Tx, events []Event, span *appendSpan) ([]Appended, error) {
	payload, ids, err := encodeEvents(events, span)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, appendQuery, payload)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", translateError(err))
	}
	returned, err := pgx.CollectRows(rows, scanAppended)
	if err != nil {
		return nil, fmt.Errorf("append events: %w", translateError(err))
	}
	return inInputOrder(ids, returned)
}

// Append appends events in a transaction of its own and commits it. See
// AppendTx.
//
// On a *pgxpool.Pool, or a *pgx.Conn outside a transaction, it takes one
// round trip (appendOnConn): BEGIN, the statement and COMMIT go together,
// and the fan-out's wake-up goes after the COMMIT, in a transaction of its
// own, instead of inside the append's: on a *pgx.Conn in the same round
// trip, on a pool from another of its connections, without the caller
// waiting for it (wakeAfterCommit).
func Append(ctx context.Context, db TxBeginner, events ...Event) ([]Appended, error) {
	if err := validateEvents(events); err != nil {
		return nil, err
	}
	ctx, span := startAppend(ctx, "Append", len(events))
	appended, err := appendOwnTx(ctx, db, events, span)
	span.end(appended, err)
	return appended, err
}

// appendOwnTx is Append for validated events.
func appendOwnTx(ctx context.Context, db TxBeginner, events []Event, span *appendSpan) ([]Appended, error) {
	switch c := db.(type) {
	case *pgxpool.Pool:
		conn, err := c.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin: %w", err)
		}
		appended, err := appendOnConn(ctx, conn.Conn(), events, span, false)
		conn.Release()
		if err == nil {
			wakeAfterCommit(c)
		}
		return appended, err
	case *pgx.Conn:
		if c.PgConn().TxStatus() == 'I' {
			return appendOnConn(ctx, c, events, span, true)
		}
	}
	var appended []Appended
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		appended, err = appendTx(ctx, tx, events, span)
		return err
	})
	return appended, err
}

// appendOnConn is Append on a connection outside a transaction, in one
// round trip: BEGIN, the wake-up switched off for the transaction, the
// append, COMMIT, then, with wake, the wake-up (wakeQuery) as a
// transaction of its own. Without wake the caller sends it
// (wakeAfterCommit): on a pool, Append returns at the COMMIT, and the
// wake-up, which may wait for that lock, is sent beside it.
//
// Why: the horizon passes an event only once every lower sequence has
// committed or rolled back, so the time between an append's sequence and
// its commit delays every event after it. Sent one by one, the statements
// put a round trip and a wake-up of the calling goroutine into that time.
// And a transaction that sends a NOTIFY takes, at commit, a lock every
// notifying transaction takes and holds it through its WAL flush: appends
// that notify commit one at a time, each waiting for the flushes of those
// before it. The wake-up alone commits asynchronously (it writes nothing
// else), so it holds that lock only for a moment, and the appends' commits
// share their flushes again.
func appendOnConn(ctx context.Context, c *pgx.Conn, events []Event, span *appendSpan, wake bool) ([]Appended, error) {
	payload, ids, err := encodeEvents(events, span)
	if err != nil {
		return nil, err
	}
	var (
		returned  []Appended
		inserted  bool
		committed bool
	)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(skipNotifyQuery)
	b.Queue(appendQuery, payload).Query(func(rows pgx.Rows) error {
		var err error
		returned, err = pgx.CollectRows(rows, scanAppended)
		inserted = err == nil
		return err
	})
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		committed = ct.String() == "COMMIT"
		return nil
	})
	if wake {
		b.Queue(wakeQuery)
	}
	err = c.SendBatch(ctx, b).Close()
	switch {
	case committed:
		// A failed wake-up costs the fan-out's poll interval at most: the
		// events are appended.
	case err == nil:
		err = errors.New("the transaction did not commit")
		fallthrough
	default:
		if c.PgConn().TxStatus() != 'I' {
			_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		if inserted {
			return nil, fmt.Errorf("commit: %w", translateError(err))
		}
		return nil, fmt.Errorf("append events: %w", translateError(err))
	}
	return inInputOrder(ids, returned)
}

// wakers holds, per pool that Append committed on, the sender of its
// wake-ups (wakeAfterCommit) while one is being sent.
var wakers sync.Map // *pgxpool.Pool → *waker

// waker sends a pool's wake-ups one at a time: an Append that commits
// while one is being sent asks for one more, so a burst of appends costs
// two notifications, not one each, and holds the commit lock of
// notifying transactions that much less.
type waker struct {
	mu      sync.Mutex
	running bool
	again   bool
}

// wakeAfterCommitTimeout bounds one wake-up: a lost one costs the fan-out
// its poll interval.
const wakeAfterCommitTimeout = 10 * time.Second

// wakeAfterCommit sends the fan-out's wake-up for an Append that
// committed on pool, from a goroutine, so that the caller need not wait for
// it (the transaction that notifies may wait at its commit for other
// notifying ones).
func wakeAfterCommit(pool *pgxpool.Pool) {
	v, _ := wakers.LoadOrStore(pool, &waker{})
	w := v.(*waker)
	w.mu.Lock()
	if w.running {
		w.again = true
		w.mu.Unlock()
		return
	}
	w.running = true
	w.mu.Unlock()
	go func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), wakeAfterCommitTimeout)
			_, _ = pool.Exec(ctx, wakeQuery)
			cancel()
			w.mu.Lock()
			if !w.again {
				w.running = false
				w.mu.Unlock()
				wakers.CompareAndDelete(pool, w)
				return
			}
			w.again = false
			w.mu.Unlock()
		}
	}()
}

// inTx runs f in a transaction of db, committing when f returns nil.
func inTx(ctx context.Context, db TxBeginner, f func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", translateError(err))
	}
	return nil
}

// wireEvent is the JSON form of an event sent to the database; see the
// comment at the top of queries.go.
type wireEvent struct {
	EventID    uuid.UUID       `json:"event_id"`
	Type       string          `json:"type"`
	Key        string          `json:"key"`
	Tags       []string        `json:"tags"`
	Data       json.RawMessage `json:"data"`
	Metadata   json.RawMessage `json:"metadata"`
	OccurredAt *time.Time      `json:"occurred_at,omitempty"`
	Version    int             `json:"version"`
}

var emptyObject = json.RawMessage(`{}`)

// encodeEvents returns the jsonb parameter of validated events and their
// ids, generating a UUIDv7 for each zero EventID, with span's trace context
// in their metadata (span may be nil). The parameter is a string so that it
// is sent as text in every pgx query execution mode, the simple protocol
// (PgBouncer) included.
func encodeEvents(events []Event, span *appendSpan) (string, []uuid.UUID, error) {
	wire := make([]wireEvent, len(events))
	ids := make([]uuid.UUID, len(events))
	for i, e := range events {
		id := e.EventID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return "", nil, fmt.Errorf("generate event id: %w", err)
			}
		}
		ids[i] = id
		w := wireEvent{EventID: id, Type: e.Type, Key: e.Key, Tags: e.Tags, Data: e.Data, Metadata: span.metadata(e.Metadata),
			Version: max(e.Version, 1)}
		if w.Tags == nil {
			w.Tags = []string{}
		}
		if len(w.Metadata) == 0 {
			w.Metadata = emptyObject
		}
		if !e.OccurredAt.IsZero() {
			w.OccurredAt = &e.OccurredAt
		}
		wire[i] = w
	}
	payload, err := json.Marshal(wire)
	if err != nil {
		return "", nil, fmt.Errorf("encode events: %w", err)
	}
	return string(payload), ids, nil
}

func scanAppended(row pgx.CollectableRow) (Appended, error) {
	var a Appended
	err := row.Scan(&a.GlobalSequence, &a.EventID)
	return a, err
}

// inInputOrder orders what an insert returned by the input order of ids.
// Rows are matched by event id, so the order in which the database returned
// them does not matter.
func inInputOrder(ids []uuid.UUID, returned []Appended) ([]Appended, error) {
	if len(returned) != len(ids) {
		return nil, fmt.Errorf("the database returned %d events for %d appended", len(returned), len(ids))
	}
	index := make(map[uuid.UUID]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	ordered := make([]Appended, len(ids))
	for _, a := range returned {
		i, ok := index[a.EventID]
		if !ok || ordered[i].GlobalSequence != 0 {
			return nil, fmt.Errorf("the database returned an unexpected event id %s", a.EventID)
		}
		ordered[i] = a
	}
	return ordered, nil
}
