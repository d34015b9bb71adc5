package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// status names a deleted horizon row and the repair; repair horizon
// recreates it; status then shows a broken assumption of the gap proof
// with its fix, in text and JSON.
func TestRepairHorizonAndProblemsInStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, dbURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	ok(t, run(t, dbURL, "pool", "create", "orders"))
	r := ok(t, run(t, dbURL, "repair", "horizon"))
	require.Contains(t, r.stdout, "nothing to repair")

	exec("DELETE FROM riverbus_horizon")
	r = run(t, dbURL, "status")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "riverbus_horizon has no row")
	require.Contains(t, r.stderr, "riverbus repair horizon")
	r = ok(t, run(t, dbURL, "repair", "horizon"))
	require.Contains(t, r.stdout, "recreated riverbus_horizon at 0")

	r = ok(t, run(t, dbURL, "status", "--json"))
	var st struct {
		Problems []map[string]any `json:"problems"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.NotNil(t, st.Problems)
	require.Empty(t, st.Problems)

	exec("ALTER SEQUENCE riverbus_event_global_sequence CACHE 10")
	r = ok(t, run(t, dbURL, "status"))
	require.Contains(t, r.stdout, "PROBLEM sequence_cache (CACHE 10)")
	require.Contains(t, r.stdout, "ALTER SEQUENCE riverbus_event_global_sequence CACHE 1")
	r = ok(t, run(t, dbURL, "status", "--json"))
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Problems, 1)
	require.Equal(t, "sequence_cache", st.Problems[0]["code"])
	require.Equal(t, true, st.Problems[0]["blocks"])
}

// An event planted above the sequence: status reports it with the repair,
// repair sequence renumbers it, and status is clean again.
func TestRepairSequenceRenumbersPlantedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	ok(t, run(t, dbURL, "pool", "create", "orders"))
	r := ok(t, run(t, dbURL, "repair", "sequence"))
	require.Contains(t, r.stdout, "nothing to repair")

	_, err = conn.Exec(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('t', '{}');
		ALTER TABLE riverbus_event DISABLE TRIGGER riverbus_event_assign;
		INSERT INTO riverbus_event (global_sequence, transaction_id, type, data) VALUES (9223372036854775000, pg_current_xact_id(), 't', '{}');
		ALTER TABLE riverbus_event ENABLE TRIGGER riverbus_event_assign`)
	require.NoError(t, err)
	r = ok(t, run(t, dbURL, "status"))
	require.Contains(t, r.stdout, "PROBLEM event_above_sequence")
	require.Contains(t, r.stdout, "riverbus repair sequence")
	r = ok(t, run(t, dbURL, "repair", "sequence"))
	require.Contains(t, r.stdout, "event 9223372036854775000 is now 2")
	r = ok(t, run(t, dbURL, "status"))
	require.NotContains(t, r.stdout, "PROBLEM")
}
