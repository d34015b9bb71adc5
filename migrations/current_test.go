package migrations_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/migrations/internal/schemadump"
)

const regenerate = "regenerate it with `go generate ./migrations` (or `make generate`) and commit it"

// freshDump migrates an empty database and returns its schema as
// schema.sql holds it (without the header), or skips the test where the
// dump could not match schema.sql: a server or pg_dump of another major
// version than the one schema.sql was made with prints the same schema
// differently.
func freshDump(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	pool := pgtest.Connect(t, url)
	skipUnlessMajorOfSchemaSQL(t, pool)
	_, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	dump, err := schemadump.Dump(ctx, url)
	require.NoError(t, err)
	return dump
}

var schemaSQLMajor = regexp.MustCompile(`of PostgreSQL (\d+)\.`)

func skipUnlessMajorOfSchemaSQL(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	file, err := os.ReadFile("schema.sql")
	require.NoError(t, err, "schema.sql is missing: "+regenerate)
	m := schemaSQLMajor.FindSubmatch(file)
	require.NotNil(t, m, "schema.sql has no header naming its PostgreSQL: "+regenerate)
	var server int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int / 10000`).Scan(&server))
	dumper, err := schemadump.Major()
	require.NoError(t, err)
	if want := string(m[1]); want != fmt.Sprint(server) || want != fmt.Sprint(dumper) {
		t.Skipf("schema.sql was dumped by PostgreSQL %s; this server is %d and its pg_dump %d, which print a schema differently", want, server, dumper)
	}
}

// schemaSQL returns schema.sql without its header.
func schemaSQL(t *testing.T) string {
	t.Helper()
	file, err := os.ReadFile("schema.sql")
	require.NoError(t, err, "schema.sql is missing: "+regenerate)
	_, body, ok := strings.Cut(string(file), "\n\n")
	require.True(t, ok, "schema.sql has no header: "+regenerate)
	return body
}

// requireSameSchema fails with the first lines where got and want differ.
func requireSameSchema(t *testing.T, want, got, msg string) {
	t.Helper()
	if want == got {
		return
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	show := func(lines []string) string {
		return strings.Join(lines[max(i-3, 0):min(i+8, len(lines))], "\n")
	}
	t.Fatalf("%s\nfirst difference at line %d; expected:\n%s\n\nfound:\n%s", msg, i+1, show(w), show(g))
}

// schema.sql is what a fresh install ends with.
func TestSchemaSQLIsCurrent(t *testing.T) {
	t.Parallel()
	requireSameSchema(t, schemaSQL(t), freshDump(t),
		"migrations/schema.sql is not the schema the migrations make: "+regenerate)
}

// An install of any older version, upgraded, ends with the objects of a
// fresh install: the same schema, down to each function's text, trigger
// and grant. -short tries three of them.
func TestUpgradeFromEachVersionEndsAsAFreshInstall(t *testing.T) {
	t.Parallel()
	want := freshDump(t)
	all, err := migrations.All()
	require.NoError(t, err)
	older := all[:len(all)-1]
	if testing.Short() {
		// The first schema, the last before the private schema (018)
		// and the functions' pinned names (017), and the newest but one.
		older = []migrations.Migration{older[0], older[15], older[len(older)-1]}
	}
	// One database walks the versions; each subtest starts from a copy of
	// it at its version, so the migrations run once rather than once per
	// version (each from scratch made this the package's longest test).
	ctx := context.Background()
	walk := pgtest.NewEmptyDatabase(t)
	for _, m := range older {
		pool, err := pgxpool.New(ctx, walk)
		require.NoError(t, err)
		err = migrations.UpTo(ctx, pool, m.Version)
		pool.Close()
		require.NoError(t, err, "migrating to %d", m.Version)
		url := pgtest.CopyDatabase(t, walk)
		t.Run(fmt.Sprintf("from_%03d", m.Version), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.Connect(t, url)
			v, err := migrations.Version(ctx, pool)
			require.NoError(t, err)
			require.Equal(t, m.Version, v)
			_, err = migrations.Up(ctx, pool)
			require.NoError(t, err)
			got, err := schemadump.Dump(ctx, url)
			require.NoError(t, err)
			requireSameSchema(t, want, got, fmt.Sprintf("an install of version %d, upgraded, differs from a fresh install", m.Version))
		})
	}
}

// sqlFunctionName is a function a current text creates.
var sqlFunctionName = regexp.MustCompile(`(?m)CREATE OR REPLACE FUNCTION (?:%1\$I\.|%I\.)?(riverbus_\w+)\(`)

// sqlTriggerName is a trigger of the current texts, with its table.
var sqlTriggerName = regexp.MustCompile(`'CREATE TRIGGER (riverbus_\w+) .*? ON %1\$I\.(\w+)'`)

// Every riverbus function and trigger of a migrated database has exactly
// one current text, and every current text names one that exists.
func TestEveryFunctionAndTriggerHasOneCurrentText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	texts, err := migrations.Current()
	require.NoError(t, err)
	var functions, triggers []string
	for _, text := range texts {
		for _, m := range sqlFunctionName.FindAllStringSubmatch(text.SQL, -1) {
			functions = append(functions, m[1])
		}
		for _, m := range sqlTriggerName.FindAllStringSubmatch(text.SQL, -1) {
			triggers = append(triggers, m[2]+"."+m[1])
		}
	}
	slices.Sort(functions)
	slices.Sort(triggers)
	require.NotEmpty(t, functions)
	require.NotEmpty(t, triggers)

	rows, err := pool.Query(ctx, `SELECT p.proname FROM pg_proc p
		WHERE p.pronamespace IN (current_schema()::regnamespace, riverbus_private_schema()::regnamespace)
		AND p.proname LIKE 'riverbus\_%' ORDER BY 1`)
	require.NoError(t, err)
	inDatabase, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, inDatabase, functions, "each riverbus function once in sql/current")

	rows, err = pool.Query(ctx, `SELECT c.relname || '.' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE NOT t.tgisinternal AND t.tgname LIKE 'riverbus\_%' ORDER BY 1`)
	require.NoError(t, err)
	inDatabase, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, inDatabase, triggers, "each riverbus trigger once in sql/current/08_triggers.sql")
}

// Migrate applies the current texts on every run: a function or trigger
// that differs from its text (changed by hand, or by a build of the same
// version with other texts) is put back, and one that is missing is made.
func TestUpPutsBackTheCurrentTexts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	var bucket int
	require.NoError(t, pool.QueryRow(ctx, `SELECT riverbus_lane_bucket('k')`).Scan(&bucket))
	_, err := pool.Exec(ctx, `
		CREATE OR REPLACE FUNCTION riverbus_lane_bucket(lane text) RETURNS integer
		LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000 $$;
		DROP TRIGGER riverbus_event_stamp ON riverbus_event;
		CREATE OR REPLACE TRIGGER riverbus_rescue_retry BEFORE UPDATE OF state ON river_job
		  FOR EACH ROW WHEN (false) EXECUTE FUNCTION riverbus_rescue_retry()`)
	require.NoError(t, err)

	res, err := migrations.Up(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, res.Riverbus)
	var after int
	require.NoError(t, pool.QueryRow(ctx, `SELECT riverbus_lane_bucket('k')`).Scan(&after))
	require.Equal(t, bucket, after)
	var stamp, rescueWhen string
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_trigger WHERE tgname = 'riverbus_event_stamp' AND tgrelid = 'riverbus_event'::regclass)::text,
		(SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'riverbus_rescue_retry')`).Scan(&stamp, &rescueWhen))
	require.Equal(t, "1", stamp)
	require.Contains(t, rescueWhen, "new.attempt < new.max_attempts")
}

// A migrate of an up-to-date database takes no lock on riverbus's or
// River's tables: it replaces functions, which needs none, and no trigger,
// each being already as 08_triggers.sql writes it. Appenders and workers in
// the middle of a transaction, or a login that merely parsed a statement on
// river_job, do not make it wait.
func TestUpToDateMigrateWaitsForNoTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	// ROW EXCLUSIVE, an appender's and a worker's: it conflicts with
	// CREATE TRIGGER's SHARE ROW EXCLUSIVE.
	_, err = tx.Exec(ctx, `LOCK TABLE river_job, riverbus_event, riverbus_command, riverbus_horizon, riverbus_pool IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	_, err = migrations.UpWithOpts(ctx, pool, &migrations.UpOpts{StatementLockTimeout: 2 * time.Second})
	if err != nil {
		var defs []string
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(q pgx.Tx) error {
			if _, err := q.Exec(ctx, `SET LOCAL search_path = pg_catalog`); err != nil {
				return err
			}
			rows, err := q.Query(ctx, `SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t
				WHERE NOT t.tgisinternal AND t.tgname LIKE 'riverbus\_%' ORDER BY t.tgrelid::regclass::text, t.tgname`)
			if err != nil {
				return err
			}
			defs, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		t.Fatalf("migrate of an up-to-date database waited for a table: %v\n"+
			"08_triggers.sql must write each trigger as pg_get_triggerdef prints it with search_path = pg_catalog, the schema as %%1$I; the server prints:\n%s",
			err, strings.Join(defs, "\n"))
	}
}
