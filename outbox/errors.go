package outbox

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverbus/riverbus/internal/pooler"
)

var (
	// ErrInvalidEvent is matched (errors.Is) by every *ValidationError: an
	// event, a command, an append condition or read parameters that were
	// rejected, by this package before any SQL or by a CHECK constraint of the
	// database. Nothing was written.
	ErrInvalidEvent = errors.New("outbox: invalid event")

	// ErrConflict is matched by *ConflictError: the append condition of
	// AppendIfTx failed because a matching event was appended after the
	// caller's position.
	ErrConflict = errors.New("outbox: append condition failed")

	// ErrDuplicate is matched by *DuplicateError: an event matching the
	// idempotency query already exists, or an event with the same EventID
	// does.
	ErrDuplicate = errors.New("outbox: duplicate")
)

// ValidationError describes one rejected input. It matches ErrInvalidEvent.
type ValidationError struct {
	// Index is the position of the offending event among the events of the
	// call, or -1 when the error is not about one event: an empty event list,
	// a command, a condition, read parameters, or a violation the database
	// found in a batch.
	Index int
	// Field names the rejected field: "Type", "Tags[1]", "Data", "Metadata",
	// "AppendCondition.FailIfEventsMatch[0]", "Command.Type", ...
	Field string
	// Reason says what is wrong, e.g. "must not be empty".
	Reason string

	err error // the database error, when the database rejected the row
}

func (e *ValidationError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("outbox: event %d: %s %s", e.Index, e.Field, e.Reason)
	}
	return fmt.Sprintf("outbox: %s %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidEvent.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEvent }

// Unwrap returns the database error (a *pgconn.PgError) for a violation the
// database found, nil otherwise.
func (e *ValidationError) Unwrap() error { return e.err }

// ConflictError is returned by AppendIfTx when an event matching
// FailIfEventsMatch exists after the condition's position. It matches
// ErrConflict. Nothing was appended; the caller reads again, decides again
// and retries.
type ConflictError struct {
	// Query is the condition's FailIfEventsMatch.
	Query Query
	// After is the condition's position.
	After int64
	// GlobalSequence is the lowest sequence above After of a matching event.
	GlobalSequence int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("outbox: append condition failed: event %d matches the query after position %d", e.GlobalSequence, e.After)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// DuplicateError is returned when the events were already appended: an
// event matching the condition's IdempotencyQuery exists (AppendIfTx), or an
// event with the same EventID does (any append). It matches ErrDuplicate.
type DuplicateError struct {
	// Query is the IdempotencyQuery that matched; nil for an EventID clash.
	Query Query
	// GlobalSequence is the lowest sequence of an event matching Query; zero
	// for an EventID clash.
	GlobalSequence int64
	// EventID is the clashing event id; zero for an IdempotencyQuery match.
	EventID uuid.UUID
}

func (e *DuplicateError) Error() string {
	if e.Query == nil {
		return fmt.Sprintf("outbox: duplicate: event id %s already exists", e.EventID)
	}
	return fmt.Sprintf("outbox: duplicate: event %d matches the idempotency query", e.GlobalSequence)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// checkFields maps the CHECK constraints of migrations/sql/001_events.up.sql
// (and 025's version) to the field they guard.
var checkFields = map[string]string{
	"riverbus_event_type_length":       "Type",
	"riverbus_event_tags_valid":        "Tags",
	"riverbus_event_metadata_object":   "Metadata",
	"riverbus_event_version_valid":     "Version",
	"riverbus_command_type_length":     "Command.Type",
	"riverbus_command_metadata_object": "Command.Metadata",
}

var uuidPattern = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)

// translateError turns the database errors a caller can act on into this
// package's errors: CHECK violations into *ValidationError, a clash on
// riverbus_event.event_id into *DuplicateError. Others are returned as they
// are.
func translateError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case pgerrcode.DuplicatePreparedStatement, pgerrcode.InvalidSQLStatementName:
		return pooler.Explain(err)
	case pgerrcode.CheckViolation:
		field, ok := checkFields[pgErr.ConstraintName]
		if !ok {
			field = "row"
		}
		return &ValidationError{Index: -1, Field: field, Reason: "rejected by the database: " + pgErr.Message, err: pgErr}
	case pgerrcode.UniqueViolation:
		if pgErr.TableName == "riverbus_event" && pgErr.ConstraintName == "riverbus_event_event_id_key" {
			dup := &DuplicateError{}
			if id, err := uuid.Parse(uuidPattern.FindString(pgErr.Detail)); err == nil {
				dup.EventID = id
			}
			return dup
		}
	}
	return err
}
