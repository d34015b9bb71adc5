package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// requireInvalid requires err to be a *ValidationError for index and field.
func requireInvalid(t *testing.T, err error, index int, field string) *outbox.ValidationError {
	t.Helper()
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	var invalid *outbox.ValidationError
	require.True(t, errors.As(err, &invalid), "%T: %v", err, err)
	require.Equal(t, index, invalid.Index, "%v", err)
	require.Equal(t, field, invalid.Field, "%v", err)
	return invalid
}

func TestAppendRejectsInvalidEvents(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	valid := event("Valid", "a=b")
	with := func(f func(e *outbox.Event)) outbox.Event {
		e := event("Valid", "a=b")
		f(&e)
		return e
	}
	id := uuid.MustParse("0190a6c4-5b1e-7c3d-8e2f-0000000000ff")
	tests := []struct {
		name   string
		events []outbox.Event
		index  int
		field  string
		error  string
	}{
		{"NoEvents", nil, -1, "events", "outbox: events must not be empty"},
		{"EmptyType", []outbox.Event{with(func(e *outbox.Event) { e.Type = "" })}, 0, "Type", "outbox: event 0: Type must not be empty"},
		{"LongType", []outbox.Event{with(func(e *outbox.Event) { e.Type = strings.Repeat("x", 256) })}, 0, "Type", "outbox: event 0: Type must be at most 255 characters, got 256"},
		{"LongTypeInRunes", []outbox.Event{with(func(e *outbox.Event) { e.Type = strings.Repeat("é", 256) })}, 0, "Type", "outbox: event 0: Type must be at most 255 characters, got 256"},
		{"TypeNotUTF8", []outbox.Event{with(func(e *outbox.Event) { e.Type = "a\xffb" })}, 0, "Type", "outbox: event 0: Type must be valid UTF-8"},
		{"TypeNUL", []outbox.Event{with(func(e *outbox.Event) { e.Type = "a\x00b" })}, 0, "Type", "outbox: event 0: Type must not contain NUL characters"},
		{"LongKey", []outbox.Event{with(func(e *outbox.Event) { e.Key = strings.Repeat("k", 1025) })}, 0, "Key", "outbox: event 0: Key must be at most 1024 bytes, got 1025"},
		{"LongTag", []outbox.Event{with(func(e *outbox.Event) { e.Tags = []string{"a=" + strings.Repeat("v", 1023)} })}, 0, "Tags[0]", "outbox: event 0: Tags[0] must be at most 1024 bytes, got 1025"},
		{"KeyNUL", []outbox.Event{with(func(e *outbox.Event) { e.Key = "k\x00" })}, 0, "Key", "outbox: event 0: Key must not contain NUL characters"},
		{"TagWithoutEquals", []outbox.Event{with(func(e *outbox.Event) { e.Tags = []string{"a"} })}, 0, "Tags[0]", `outbox: event 0: Tags[0] must be name=value with a non-empty name, got "a"`},
		{"TagWithoutName", []outbox.Event{with(func(e *outbox.Event) { e.Tags = []string{"a=b", "=x"} })}, 0, "Tags[1]", `outbox: event 0: Tags[1] must be name=value with a non-empty name, got "=x"`},
		{"EmptyTag", []outbox.Event{with(func(e *outbox.Event) { e.Tags = []string{""} })}, 0, "Tags[0]", `outbox: event 0: Tags[0] must be name=value with a non-empty name, got ""`},
		{"NoData", []outbox.Event{with(func(e *outbox.Event) { e.Data = nil })}, 0, "Data", "outbox: event 0: Data must not be empty"},
		{"DataNotJSON", []outbox.Event{with(func(e *outbox.Event) { e.Data = json.RawMessage(`{"a":`) })}, 0, "Data", "outbox: event 0: Data must be valid JSON"},
		{"DataBlank", []outbox.Event{with(func(e *outbox.Event) { e.Data = json.RawMessage(`  `) })}, 0, "Data", "outbox: event 0: Data must be valid JSON"},
		{"DataNotUTF8", []outbox.Event{with(func(e *outbox.Event) { e.Data = json.RawMessage("\"\xff\"") })}, 0, "Data", "outbox: event 0: Data must be valid UTF-8"},
		{"DataNUL", []outbox.Event{with(func(e *outbox.Event) { e.Data = json.RawMessage(`{"a":"x\u0000"}`) })}, 0, "Data", `outbox: event 0: Data must not contain \u0000, which PostgreSQL jsonb cannot store`},
		{"MetadataArray", []outbox.Event{with(func(e *outbox.Event) { e.Metadata = json.RawMessage(`[]`) })}, 0, "Metadata", "outbox: event 0: Metadata must be a JSON object, got array"},
		{"MetadataString", []outbox.Event{with(func(e *outbox.Event) { e.Metadata = json.RawMessage(`"s"`) })}, 0, "Metadata", "outbox: event 0: Metadata must be a JSON object, got string"},
		{"MetadataNull", []outbox.Event{with(func(e *outbox.Event) { e.Metadata = json.RawMessage(`null`) })}, 0, "Metadata", "outbox: event 0: Metadata must be a JSON object, got null"},
		{"MetadataNotJSON", []outbox.Event{with(func(e *outbox.Event) { e.Metadata = json.RawMessage(`{`) })}, 0, "Metadata", "outbox: event 0: Metadata must be valid JSON"},
		{"DataTooDeep", []outbox.Event{with(func(e *outbox.Event) { e.Data = json.RawMessage(nested(outbox.EventMaxDepth + 1)) })}, 0, "Data", "outbox: event 0: Data must nest at most 1000 levels deep, got 1001"},
		{"MetadataTooDeep", []outbox.Event{with(func(e *outbox.Event) { e.Metadata = json.RawMessage(`{"a": ` + nested(outbox.EventMaxDepth) + `}`) })}, 0, "Metadata", "outbox: event 0: Metadata must nest at most 1000 levels deep, got 1001"},
		{"TooBig", []outbox.Event{with(func(e *outbox.Event) {
			e.Data = json.RawMessage(`"` + strings.Repeat("x", outbox.EventMaxBytes/2) + `"`)
			e.Metadata = json.RawMessage(`{"s": "` + strings.Repeat("y", outbox.EventMaxBytes/2) + `"}`)
		})}, 0, "Data", "outbox: event 0: Data must be at most 67108864 bytes together with Metadata, got 67108875"},
		{"NegativeVersion", []outbox.Event{with(func(e *outbox.Event) { e.Version = -1 })}, 0, "Version", "outbox: event 0: Version must be 1 to 10000 (0 means 1), got -1"},
		{"VersionTooHigh", []outbox.Event{with(func(e *outbox.Event) { e.Version = outbox.VersionMax + 1 })}, 0, "Version", "outbox: event 0: Version must be 1 to 10000 (0 means 1), got 10001"},
		{"SecondEvent", []outbox.Event{valid, with(func(e *outbox.Event) { e.Type = "" })}, 1, "Type", "outbox: event 1: Type must not be empty"},
		{"DuplicateEventID", []outbox.Event{with(func(e *outbox.Event) { e.EventID = id }), valid, with(func(e *outbox.Event) { e.EventID = id })}, 2, "EventID", "outbox: event 2: EventID must be unique, 0190a6c4-5b1e-7c3d-8e2f-0000000000ff is also the id of event 0"},
	}
	cond := outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"a=b"}}}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := outbox.Append(ctx, bundle.db, tt.events...)
			requireInvalid(t, err, tt.index, tt.field)
			require.EqualError(t, err, tt.error)

			tx, err := bundle.db.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			_, err = outbox.AppendTx(ctx, tx, tt.events...)
			requireInvalid(t, err, tt.index, tt.field)
			_, err = outbox.AppendIfTx(ctx, tx, cond, tt.events...)
			requireInvalid(t, err, tt.index, tt.field)
			_, err = outbox.AppendIf(ctx, bundle.db, cond, tt.events...)
			requireInvalid(t, err, tt.index, tt.field)
			// No SQL ran: the transaction is still usable.
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
		})
	}
	require.Equal(t, 0, countEvents(t, bundle.db))

	// The bounds themselves are accepted.
	appended, err := outbox.Append(ctx, bundle.db, with(func(e *outbox.Event) {
		e.Type = strings.Repeat("é", 255)
		e.Tags = []string{"a=", "b==", "c=d=e"}
		e.Metadata = json.RawMessage(` {} `)
		e.Data = json.RawMessage(`["\\u0000 is text here", "[[[[", ` + nested(outbox.EventMaxDepth-1) + `]`)
	}))
	require.NoError(t, err)
	require.Equal(t, int64(1), appended[0].GlobalSequence)
}

func TestAppendIfRejectsInvalidConditions(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tests := []struct {
		name  string
		cond  outbox.AppendCondition
		field string
		error string
	}{
		{"Empty", outbox.AppendCondition{}, "AppendCondition", "outbox: AppendCondition must have FailIfEventsMatch or IdempotencyQuery items"},
		{"OnlyAfter", outbox.AppendCondition{After: 5}, "AppendCondition", "outbox: AppendCondition must have FailIfEventsMatch or IdempotencyQuery items"},
		{"EmptyItem", outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"a=b"}}, {}}}, "AppendCondition.FailIfEventsMatch[1]", "outbox: AppendCondition.FailIfEventsMatch[1] must have at least one type or tag"},
		{"EmptyIdempotencyItem", outbox.AppendCondition{IdempotencyQuery: outbox.Query{{Types: []string{}, Tags: []string{}}}}, "AppendCondition.IdempotencyQuery[0]", "outbox: AppendCondition.IdempotencyQuery[0] must have at least one type or tag"},
		{"BadTag", outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"a=b", "c"}}}}, "AppendCondition.FailIfEventsMatch[0].Tags[1]", `outbox: AppendCondition.FailIfEventsMatch[0].Tags[1] must be name=value with a non-empty name, got "c"`},
		{"EmptyType", outbox.AppendCondition{IdempotencyQuery: outbox.Query{{Types: []string{""}}}}, "AppendCondition.IdempotencyQuery[0].Types[0]", "outbox: AppendCondition.IdempotencyQuery[0].Types[0] must not be empty"},
		{"NegativeAfter", outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"a=b"}}}, After: -1}, "AppendCondition.After", "outbox: AppendCondition.After must not be negative, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := outbox.AppendIf(ctx, bundle.db, tt.cond, event("A", "a=b"))
			requireInvalid(t, err, -1, tt.field)
			require.EqualError(t, err, tt.error)
		})
	}
	require.Equal(t, 0, countEvents(t, bundle.db))
}

func TestReadRejectsInvalidParams(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tests := []struct {
		name   string
		params outbox.ReadParams
		field  string
	}{
		{"NegativeLimit", outbox.ReadParams{Limit: -1}, "ReadParams.Limit"},
		{"NegativeAfter", outbox.ReadParams{After: -1}, "ReadParams.After"},
		{"EmptyItem", outbox.ReadParams{Query: outbox.Query{{}}}, "ReadParams.Query[0]"},
		{"BadTag", outbox.ReadParams{Query: outbox.Query{{Tags: []string{"=x"}}}}, "ReadParams.Query[0].Tags[0]"},
		{"KeyNUL", outbox.ReadParams{Key: "\x00"}, "ReadParams.Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := outbox.Read(ctx, bundle.db, tt.params)
			requireInvalid(t, err, -1, tt.field)
		})
	}
}

// The database enforces the same rules whatever path the rows take.
// nested returns a JSON array nested depth levels deep.
func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

func TestDatabaseRejectsInvalidRows(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tests := []struct {
		name       string
		values     string
		code       string
		constraint string
	}{
		{"EmptyType", `('', '', '{}', '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_type_length"},
		{"LongType", `(repeat('x', 256), '', '{}', '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_type_length"},
		{"LongTypeInCharacters", `(repeat('é', 256), '', '{}', '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_type_length"},
		{"TagWithoutEquals", `('T', '', '{a}', '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_tags_valid"},
		{"TagWithoutName", `('T', '', '{"ok=1","=x"}', '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_tags_valid"},
		{"NullTag", `('T', '', ARRAY[NULL]::text[], '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_tags_valid"},
		{"LongTag", `('T', '', ARRAY['a=' || repeat('v', 1023)], '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_tags_valid"},
		{"LongKey", `('T', repeat('k', 1025), '{}', '{}', '{}')`, pgerrcode.CheckViolation, "riverbus_event_key_length"},
		{"MetadataArray", `('T', '', '{}', '{}', '[]')`, pgerrcode.CheckViolation, "riverbus_event_metadata_object"},
		{"MetadataString", `('T', '', '{}', '{}', '"s"')`, pgerrcode.CheckViolation, "riverbus_event_metadata_object"},
		{"NullData", `('T', '', '{}', NULL, '{}')`, pgerrcode.NotNullViolation, ""},
		// Over 64 MiB of jsonb, however well it compresses.
		{"TooBig", `('T', '', '{}', to_jsonb(repeat('x', 40000000)), jsonb_build_object('s', repeat('y', 30000000)))`, pgerrcode.CheckViolation, "riverbus_event_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bundle.db.Exec(ctx, "INSERT INTO riverbus_event (type, key, tags, data, metadata) VALUES "+tt.values)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%v", err)
			require.Equal(t, tt.code, pgErr.Code, pgErr.Message)
			require.Equal(t, tt.constraint, pgErr.ConstraintName)
		})
	}
	require.Equal(t, 0, countEvents(t, bundle.db))

	_, err := bundle.db.Exec(ctx, "INSERT INTO riverbus_event (type, key, tags, data, metadata) VALUES (repeat('é', 255), '', '{a=,b==}', 'null', '{}')")
	require.NoError(t, err)
	require.Equal(t, 1, countEvents(t, bundle.db))
}

// A CHECK violation the database finds is a *ValidationError too. The test
// database gets a stricter type length than the package checks, standing in
// for a constraint this version of the package does not know.
func TestAppendMapsCheckViolations(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	_, err := bundle.db.Exec(ctx, `
ALTER TABLE riverbus_event DROP CONSTRAINT riverbus_event_type_length;
ALTER TABLE riverbus_event ADD CONSTRAINT riverbus_event_type_length CHECK (char_length(type) BETWEEN 1 AND 10);
ALTER TABLE riverbus_event ADD CONSTRAINT test_no_secret CHECK (NOT tags @> '{secret=1}')`)
	require.NoError(t, err)

	_, err = outbox.Append(ctx, bundle.db, event("Short"), event("MuchTooLongForThisTable"))
	invalid := requireInvalid(t, err, -1, "Type")
	require.Equal(t, `rejected by the database: new row for relation "riverbus_event" violates check constraint "riverbus_event_type_length"`, invalid.Reason)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr))
	require.Equal(t, pgerrcode.CheckViolation, pgErr.Code)

	_, err = outbox.Append(ctx, bundle.db, event("Short", "secret=1"))
	requireInvalid(t, err, -1, "row")

	_, err = outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"a=b"}}}}, event("MuchTooLongForThisTable"))
	requireInvalid(t, err, -1, "Type")
	require.Equal(t, 0, countEvents(t, bundle.db))
}
