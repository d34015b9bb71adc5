package migrations_test

import (
	"cmp"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/migrations"
)

// newer is a migration of a build newer than this one; oldestCode 0 means
// this build may not run against it.
func newer(version, oldestCode int) migrations.Migration {
	return migrations.Migration{Version: version, Name: "newer", OldestCode: oldestCode,
		SQL: `CREATE TABLE riverbus_newer_test_` + strconv.Itoa(version) + ` ()`}
}

// schemaNeeds is the oldest code this build's migrations let run: a newer
// migration that needs no newer code than that is compatible with all of
// it.
func schemaNeeds(t *testing.T) int {
	all, err := migrations.All()
	require.NoError(t, err)
	needs := 0
	for _, m := range all {
		needs = max(needs, cmp.Or(m.OldestCode, m.Version))
	}
	return needs
}

// A migration that needs newer code hands over: it waits for the
// delivering transaction of the old code that passed the check, a check
// begun while it waits waits for its commit and then refuses, naming the
// schema's version and the code's, and the lock-free Check says the same.
func TestMigrationNeedingNewerCodeHandsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	code := migrations.Newest()
	require.GreaterOrEqual(t, code, migrations.SchemaCheckVersion)
	require.NoError(t, migrations.Check(ctx, db, code))

	// An old process's batch, in flight: it passed the check.
	inFlight, err := db.Begin(ctx)
	require.NoError(t, err)
	defer inFlight.Rollback(context.Background()) //nolint:errcheck
	_, err = inFlight.Exec(ctx, migrations.SQLSchemaCheck, code)
	require.NoError(t, err)

	migrated := make(chan error, 1)
	go func() {
		_, err := migrations.UpWithOpts(ctx, db, &migrations.UpOpts{Newer: []migrations.Migration{newer(code+1, 0)}})
		migrated <- err
	}()
	testwait.Eventually(t, 10*time.Second, func() bool { return schemaLockWaiters(t, db) == 1 },
		"migrate waits for the delivering transaction that passed the check")

	// The next transaction of the old process, begun while migrate waits.
	next := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, migrations.SQLSchemaCheck, code)
		next <- err
	}()
	testwait.Eventually(t, 10*time.Second, func() bool { return schemaLockWaiters(t, db) == 2 },
		"the next check waits behind migrate")
	select {
	case err := <-migrated:
		t.Fatalf("migrate finished while a transaction that passed the check was in flight: %v", err)
	default:
	}

	require.NoError(t, inFlight.Commit(ctx))
	require.NoError(t, <-migrated)
	err = <-next
	tooNew := migrations.AsSchemaTooNew(err)
	require.NotNil(t, tooNew, "the check after the migration refuses: %v", err)
	require.Equal(t, migrations.SchemaTooNewError{Schema: code + 1, Needs: code + 1, Code: code}, *tooNew)
	require.Contains(t, err.Error(), "riverbus schema version")

	err = migrations.Check(ctx, db, code)
	require.Equal(t, &migrations.SchemaTooNewError{Schema: code + 1, Needs: code + 1, Code: code}, err)
	require.EqualError(t, err, "riverbus schema version "+itoa(code+1)+" is newer than this code knows ("+itoa(code)+
		"): replace this process with a build that knows schema version "+itoa(code+1))
	// The newer build runs.
	require.NoError(t, migrations.Check(ctx, db, code+1))
	_, err = db.Exec(ctx, migrations.SQLSchemaCheck, code+1)
	require.NoError(t, err)
}

// A migration that declares this build compatible (riverbus:oldest-code)
// leaves it running, and waits for nothing; one after it that does not
// stops it.
func TestCompatibleMigrationKeepsOldCodeRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	code := migrations.Newest()

	inFlight, err := db.Begin(ctx)
	require.NoError(t, err)
	defer inFlight.Rollback(context.Background()) //nolint:errcheck
	_, err = inFlight.Exec(ctx, migrations.SQLSchemaCheck, code)
	require.NoError(t, err)
	upCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = migrations.UpWithOpts(upCtx, db, &migrations.UpOpts{Newer: []migrations.Migration{newer(code+1, schemaNeeds(t))}})
	require.NoError(t, err, "a compatible migration does not wait for the old code's transactions")
	require.NoError(t, inFlight.Commit(ctx))
	_, err = db.Exec(ctx, migrations.SQLSchemaCheck, code)
	require.NoError(t, err)
	require.NoError(t, migrations.Check(ctx, db, code))

	_, err = migrations.UpWithOpts(upCtx, db, &migrations.UpOpts{Newer: []migrations.Migration{newer(code+1, code), newer(code+2, code+1)}})
	require.NoError(t, err)
	_, err = db.Exec(ctx, migrations.SQLSchemaCheck, code)
	require.Equal(t, &migrations.SchemaTooNewError{Schema: code + 2, Needs: code + 1, Code: code}, migrations.AsSchemaTooNew(err))
	require.EqualError(t, migrations.Check(ctx, db, code), "riverbus schema version "+itoa(code+2)+" needs code that knows version "+
		itoa(code+1)+" or newer; this code knows "+itoa(code)+": replace this process with a newer build")
	require.NoError(t, migrations.Check(ctx, db, code+1))
}

// A riverbus:oldest-code line is read, and one that names code from before
// the check, or the migration itself, is refused.
func TestOldestCodeLine(t *testing.T) {
	t.Parallel()
	all, err := migrations.All()
	require.NoError(t, err)
	for _, m := range all {
		want := 0
		switch m.Name {
		case "one_pause": // triggers older code never sees
			want = 22
		case "horizon_marks": // marks older code does not write, which only makes rewinds reach back further
			want = 22
		case "backfill": // a table older code never reads
			want = 22
		}
		require.Equal(t, want, m.OldestCode, "migration %d", m.Version)
	}
	for _, c := range []struct {
		sql  string
		want int
		err  string
	}{
		{sql: "-- riverbus:oldest-code 22\nCREATE TABLE x ();", want: 22},
		{sql: "CREATE TABLE x ();", want: 0},
		{sql: "-- riverbus:oldest-code 21\n", err: "riverbus:oldest-code 21 must be at least 22"},
		{sql: "-- riverbus:oldest-code 30\n", err: "below the migration's version 30"},
		{sql: "-- riverbus:oldest-code 22\n-- riverbus:oldest-code 23\n", err: "more than one"},
	} {
		got, err := migrations.OldestCode(migrations.Migration{Version: 30, SQL: c.sql})
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.sql)
			continue
		}
		require.NoError(t, err, c.sql)
		require.Equal(t, c.want, got, c.sql)
	}
}

// A database migrated by an older build is older than this one: Check
// says so (the start-up refusal).
func TestCheckOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Connect(t, pgtest.NewEmptyDatabase(t))
	require.ErrorIs(t, migrations.Check(ctx, db, migrations.Newest()), migrations.ErrOlderSchema)
	all, err := migrations.All()
	require.NoError(t, err)
	var before []migrations.Migration
	for _, m := range all {
		if m.Version < migrations.SchemaCheckVersion {
			before = append(before, m)
		}
	}
	_, err = migrations.UpWithMigrations(ctx, db, &migrations.UpOpts{}, before)
	require.NoError(t, err)
	err = migrations.Check(ctx, db, migrations.Newest())
	require.ErrorIs(t, err, migrations.ErrOlderSchema)
	require.ErrorContains(t, err, "this build needs "+itoa(migrations.Newest()))
}

// schemaLockWaiters counts the sessions waiting for riverbus_schema_lock.
func schemaLockWaiters(t *testing.T, db *pgxpool.Pool) int {
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE c.relname = 'riverbus_schema_lock' AND NOT l.granted
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
	return n
}

func itoa(n int) string { return strconv.Itoa(n) }
