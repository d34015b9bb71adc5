package outbox_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// An append records each event's version, 0 as 1, on both insert paths, and
// Read returns it.
func TestAppendRecordsTheVersion(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	versioned := func(typ string, version int) outbox.Event {
		e := event(typ, "a=b")
		e.Version = version
		return e
	}
	_, err := outbox.Append(ctx, bundle.db, versioned("Zero", 0), versioned("Two", 2), versioned("Max", outbox.VersionMax))
	require.NoError(t, err)
	_, err = outbox.AppendIf(ctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Types: []string{"Nothing"}}}},
		versioned("IfZero", 0), versioned("IfThree", 3))
	require.NoError(t, err)

	events, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{})
	require.NoError(t, err)
	got := map[string]int{}
	for _, e := range events {
		got[e.Type] = e.Version
	}
	require.Equal(t, map[string]int{"Zero": 1, "Two": 2, "Max": outbox.VersionMax, "IfZero": 1, "IfThree": 3}, got)

	// The other reads (by key, by query) return it too.
	byKey, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{Key: events[1].Key, Query: outbox.Query{{Types: []string{"Two"}}}})
	require.NoError(t, err)
	require.Len(t, byKey, 1)
	require.Equal(t, 2, byKey[0].Version)
	byQuery, err := outbox.Read(ctx, bundle.db, outbox.ReadParams{Query: outbox.Query{{Types: []string{"IfThree"}}, {Tags: []string{"a=b"}, Types: []string{"Max"}}}})
	require.NoError(t, err)
	require.Len(t, byQuery, 2)
	require.Equal(t, outbox.VersionMax, byQuery[0].Version)
	require.Equal(t, 3, byQuery[1].Version)
}

// The database holds the same bounds, whatever path a row takes: a row
// that does not name the column is version 1, as every row of an older
// appender is.
func TestDatabaseChecksTheVersion(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	for _, v := range []int{0, -1, outbox.VersionMax + 1} {
		_, err := bundle.db.Exec(ctx, `INSERT INTO riverbus_event (type, data, version) VALUES ('T', '{}', $1)`, v)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "version %d: %v", v, err)
		require.Equal(t, pgerrcode.CheckViolation, pgErr.Code, pgErr.Message)
		require.Equal(t, "riverbus_event_version_valid", pgErr.ConstraintName)
	}
	var version int
	require.NoError(t, bundle.db.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('Old', '{}') RETURNING version`).Scan(&version))
	require.Equal(t, 1, version)

	// VersionMax is the CHECK's bound.
	var def string
	require.NoError(t, bundle.db.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'riverbus_event_version_valid'`).Scan(&def))
	require.Equal(t, "CHECK (((version >= 1) AND (version <= "+strconv.Itoa(outbox.VersionMax)+"))) NOT VALID", def)
}
