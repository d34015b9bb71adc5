package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query. *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadParams select the events Read returns.
type ReadParams struct {
	// Query selects events by type and tags. Empty means every event.
	Query Query
	// Key, when not empty, selects only events with this key.
	Key string
	// After selects only events with a higher sequence. Zero means from the
	// first event.
	After int64
	// Limit caps the number of events returned. Zero means no limit.
	Limit int
}

// Read returns the committed events that match params, in sequence order,
// for example to build a decision model before AppendIf: the GlobalSequence
// of the last event returned for the condition's query is the condition's
// After (zero when none was returned). Inside a transaction (db a pgx.Tx),
// Read also sees that transaction's own events.
//
// Invalid params return *ValidationError (ErrInvalidEvent) before any SQL.
//
// Events are read by the index that serves each query item: an item with
// tags through the GIN index on tags, an item with only types through the
// (type, global_sequence) index, and a Key through the (key,
// global_sequence) index.
func Read(ctx context.Context, db Querier, params ReadParams) ([]Event, error) {
	if err := validateReadParams(params); err != nil {
		return nil, err
	}
	var limit *int64
	if params.Limit > 0 {
		l := int64(params.Limit)
		limit = &l
	}
	var (
		rows pgx.Rows
		err  error
	)
	switch {
	case params.Key != "":
		items, eerr := encodeItems(params.Query)
		if eerr != nil {
			return nil, eerr
		}
		rows, err = db.Query(ctx, readKeyQuery, params.Key, params.After, items, limit)
	case len(params.Query) > 0:
		types, items, serr := splitQuery(params.Query)
		if serr != nil {
			return nil, serr
		}
		rows, err = db.Query(ctx, readQuery, types, items, params.After, limit)
	default:
		rows, err = db.Query(ctx, readAllQuery, params.After, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return events, nil
}

func scanEvent(row pgx.CollectableRow) (Event, error) {
	var e Event
	err := row.Scan(&e.GlobalSequence, &e.EventID, &e.Type, &e.Key, &e.Tags, &e.Data, &e.Metadata, &e.OccurredAt, &e.Version)
	return e, err
}
