package migrations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
)

// qualifiedFunctions run on the append and lane hot paths without a SET
// clause (migration 017 says why): they name every relation with its schema
// and every function and operator in pg_catalog. TestPlantedNamesAreNeverUsed
// runs them with a search_path that puts planted look-alikes first.
var qualifiedFunctions = map[string]bool{
	"riverbus_event_assign": true,
	"riverbus_tags_valid":   true,
	"riverbus_lane_bucket":  true,
	"riverbus_event_stamp":  true, // 019: per row, as the assign trigger
}

// riverbusFunctions lists every riverbus function of the database (by
// name, in any schema), with its schema, SECURITY DEFINER flag and
// search_path setting ("" when it has none).
type riverbusFunction struct {
	signature, schema, searchPath string
	name                          string
	definer                       bool
}

func riverbusFunctions(t *testing.T, db *pgxpool.Pool) []riverbusFunction {
	t.Helper()
	rows, err := db.Query(context.Background(), `
SELECT p.oid::regprocedure::text, p.proname, n.nspname, p.prosecdef,
	coalesce((SELECT substr(c, length('search_path=') + 1) FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%'), '')
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname LIKE 'riverbus\_%' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
ORDER BY 1`)
	require.NoError(t, err)
	var out []riverbusFunction
	var f riverbusFunction
	_, err = pgx.ForEachRow(rows, []any{&f.signature, &f.name, &f.schema, &f.definer, &f.searchPath}, func() error {
		out = append(out, f)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(out), 20)
	return out
}

// writableSchemas lists the schemas in which PUBLIC, riverbus_app or
// riverbus_worker may create objects: a function that searches one of them
// can be handed a planted function or operator.
func writableSchemas(t *testing.T, db *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT nspname FROM pg_namespace
		WHERE has_schema_privilege('public', oid, 'CREATE')
			OR has_schema_privilege('riverbus_app', oid, 'CREATE')
			OR has_schema_privilege('riverbus_worker', oid, 'CREATE')`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// searchPathProblem says what is wrong with a function's pinned
// search_path, or "" when nothing is: pg_catalog first (so no schema can
// put an operator or function before the built-in one), pg_temp last (it is
// searched first when missing), and no schema another role may create in.
func searchPathProblem(path string, writable map[string]bool) string {
	if path == "" {
		return "no search_path setting"
	}
	parts := strings.Split(path, ",")
	for i := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(parts[i]), `"`)
	}
	if parts[0] != "pg_catalog" {
		return "search_path " + path + " does not start with pg_catalog"
	}
	if parts[len(parts)-1] != "pg_temp" {
		return "search_path " + path + " does not end with pg_temp"
	}
	for _, p := range parts[1 : len(parts)-1] {
		if p == "$user" || writable[p] {
			return "search_path " + path + " searches " + p + ", where other roles may create objects"
		}
	}
	return ""
}

// Every riverbus function resolves only riverbus's and PostgreSQL's own
// names, whoever calls it and whatever its session holds: it pins
// search_path to pg_catalog first and pg_temp last, with no schema another
// role may create in, or it is one of the qualified hot-path functions
// (checked by running them, below). A function whose current text
// (sql/current) lacks its SET clause fails here.
func TestFunctionsResolveOnlyTheirOwnNames(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	writable := writableSchemas(t, b.owner)
	for _, f := range riverbusFunctions(t, b.owner) {
		if qualifiedFunctions[f.name] {
			require.Empty(t, f.searchPath, "%s: a qualified hot-path function with a SET clause", f.signature)
			continue
		}
		require.Empty(t, searchPathProblem(f.searchPath, writable), f.signature)
	}
}

// setupWritablePublic is setupRoles on a database where PUBLIC may use and
// create in public, as before PostgreSQL 15.
func setupWritablePublic(t *testing.T) *rolesBundle {
	t.Helper()
	b := setupRoles(t)
	_, err := b.owner.Exec(context.Background(), `GRANT USAGE, CREATE ON SCHEMA public TO PUBLIC`)
	require.NoError(t, err)
	return b
}

// No SECURITY DEFINER function of riverbus may resolve a name through a
// schema PUBLIC can write: on a database where PUBLIC may create in public
// (every database made before PostgreSQL 15, and many since), an appender
// that plants an operator there must not get it run as the owner.
func TestSecurityDefinerFunctionsSearchNoWritableSchema(t *testing.T) {
	t.Parallel()
	b := setupWritablePublic(t)
	writable := writableSchemas(t, b.owner)
	require.True(t, writable["public"])
	var definers []string
	for _, f := range riverbusFunctions(t, b.owner) {
		if !f.definer {
			continue
		}
		definers = append(definers, f.name)
		require.Empty(t, searchPathProblem(f.searchPath, writable), f.signature)
	}
	require.Contains(t, definers, "riverbus_retention_step")
}

// The planted operator: an appender on a database where PUBLIC may create
// in public puts there operators that match the retention step's
// expressions better than the built-in ones (|| on text and bigint for
// `pool || ' job ' || job_id`, = and <> on River's job state for `state
// NOT IN (...)`, where the built-ins take anyenum), each of which would
// record who ran it and try to make the appender a superuser. A worker
// then runs retention with a policy set. None of them ever runs as the
// owner, and the appender stays what it was.
func TestRetentionStepRunsNoPlantedOperator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWritablePublic(t)
	app := b.login(t, "riverbus_app")
	worker := b.login(t, "riverbus_worker")
	var appName string
	require.NoError(t, app.QueryRow(ctx, `SELECT current_user`).Scan(&appName))
	t.Cleanup(func() { // before the role is dropped
		_, err := b.owner.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{appName}.Sanitize())
		require.NoError(t, err)
	})

	for range 5 {
		_, err := outbox.Append(ctx, app, outbox.Event{Type: "thing.happened", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	_, err := b.owner.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 5;
		INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ('orders', 3, 3);
		INSERT INTO river_job (kind, args, queue, state, max_attempts, priority)
			VALUES ('orders', '{"global_sequence": 4}', 'default', 'available', 1, 1);
		INSERT INTO riverbus_dead_letter (job_id, pool, global_sequence, queue, args, attempt, max_attempts, priority)
			VALUES (999, 'orders', 5, 'default', '{"global_sequence": 5, "undeliverable": "x"}', 1, 1, 1)`)
	require.NoError(t, err)

	// What the planted code does when it runs: records its caller in a
	// table of the appender's that anyone may write, and tries to make the
	// appender a superuser. It returns what the built-in would, so nothing
	// else shows that it ran.
	ident := pgx.Identifier{appName}.Sanitize()
	_, err = app.Exec(ctx, fmt.Sprintf(`
CREATE TABLE public.rbt_ran (who text, what text);
GRANT INSERT ON public.rbt_ran TO PUBLIC;
CREATE FUNCTION public.rbt_escalate(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.rbt_ran VALUES (current_user, what);
  BEGIN
    EXECUTE 'ALTER ROLE %s SUPERUSER';
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
END
$$;
CREATE FUNCTION public.rbt_concat(a text, b bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.rbt_escalate('||'); RETURN a OPERATOR(pg_catalog.||) b::text; END $$;
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = bigint, FUNCTION = public.rbt_concat);
CREATE FUNCTION public.rbt_state_eq(a river_job_state, b river_job_state) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.rbt_escalate('='); RETURN a::text OPERATOR(pg_catalog.=) b::text; END $$;
CREATE OPERATOR public.= (LEFTARG = river_job_state, RIGHTARG = river_job_state, FUNCTION = public.rbt_state_eq);
CREATE FUNCTION public.rbt_state_ne(a river_job_state, b river_job_state) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.rbt_escalate('<>'); RETURN a::text OPERATOR(pg_catalog.<>) b::text; END $$;
CREATE OPERATOR public.<> (LEFTARG = river_job_state, RIGHTARG = river_job_state, FUNCTION = public.rbt_state_ne);
CREATE FUNCTION public.rbt_le(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.rbt_escalate('<='); RETURN a OPERATOR(pg_catalog.<=) b; END $$;
CREATE OPERATOR public.<= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.rbt_le);
`, strings.ReplaceAll(ident, "'", "''")))
	require.NoError(t, err)

	for _, keep := range []string{"0", "1 hour"} {
		_, err = b.owner.Exec(ctx, `UPDATE riverbus_retention SET enabled = true, keep = $1::interval`, keep)
		require.NoError(t, err)
		for _, apply := range []bool{false, true} {
			var events int64
			var stopped string
			require.NoError(t, worker.QueryRow(ctx, `SELECT events, stopped_by FROM riverbus_retention_step(0, NULL, NULL, 10, $1)`, apply).
				Scan(&events, &stopped))
		}
	}
	var trimmed int64
	require.NoError(t, b.owner.QueryRow(ctx, `SELECT trimmed_through FROM riverbus_retention`).Scan(&trimmed))
	require.Equal(t, int64(3), trimmed, "retention ran, up to the pool's cursor")

	rows, err := b.owner.Query(ctx, `SELECT who || ' ran ' || what FROM public.rbt_ran`)
	require.NoError(t, err)
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, ran, "planted code ran")
	var super bool
	require.NoError(t, b.owner.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, appName).Scan(&super))
	require.False(t, super, "the appender became a superuser")
}

// plantEverywhere gives conn's session a temporary table or sequence with
// the name of every table and sequence of schema s (riverbus's and
// River's), each empty or never called, so that a function resolving one of
// those names through the session's path would use the planted one. It
// returns their names.
func plantEverywhere(t *testing.T, conn *pgx.Conn, s string) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.relname::text, c.relkind::text FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'S') AND c.relname LIKE 'river%'
		ORDER BY 1`, s)
	require.NoError(t, err)
	var names, kinds []string
	var name, kind string
	_, err = pgx.ForEachRow(rows, []any{&name, &kind}, func() error {
		names, kinds = append(names, name), append(kinds, kind)
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, names, "riverbus_event_global_sequence")
	require.Contains(t, names, "riverbus_pool")
	for i, n := range names {
		ident := pgx.Identifier{n}.Sanitize()
		sql := fmt.Sprintf("CREATE TEMP TABLE %s (LIKE %s)", ident, pgx.Identifier{s, n}.Sanitize())
		if kinds[i] == "S" {
			sql = fmt.Sprintf("CREATE TEMP SEQUENCE %s START 1000000", ident)
		}
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	return names
}

// plantedUse lists the planted temporary objects something used: a table
// with rows, a sequence that handed out a number.
func plantedUse(t *testing.T, conn *pgx.Conn, names []string) []string {
	t.Helper()
	var used []string
	for _, n := range names {
		var kind string
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT c.relkind::text FROM pg_class c
			WHERE c.relnamespace = pg_my_temp_schema() AND c.relname = $1`, n).Scan(&kind))
		sql := "SELECT count(*) > 0 FROM pg_temp." + pgx.Identifier{n}.Sanitize()
		if kind == "S" {
			sql = "SELECT is_called FROM pg_temp." + pgx.Identifier{n}.Sanitize()
		}
		var u bool
		require.NoError(t, conn.QueryRow(context.Background(), sql).Scan(&u))
		if u {
			used = append(used, n)
		}
	}
	return used
}

// Every riverbus function and trigger runs in a session that planted a
// temporary table or sequence of every riverbus and River name, and put
// first on its search_path a schema of look-alikes of the functions and
// operators the hot-path functions use (each records that it ran). Each
// function does its work on riverbus's own objects, and no planted object
// is used. The statements the test itself sends name the schema. Every
// riverbus function must be called here (a new one joins the list).
func TestPlantedNamesAreNeverUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	var s string
	require.NoError(t, db.QueryRow(ctx, `SELECT current_schema()`).Scan(&s))
	q := func(name string) string { return pgx.Identifier{s, name}.Sanitize() }
	_, err := db.Exec(ctx, `CREATE SCHEMA rbt_evil;
CREATE TABLE rbt_evil.ran (what text);
CREATE FUNCTION rbt_evil.ran(what text) RETURNS void LANGUAGE sql AS $$ INSERT INTO rbt_evil.ran VALUES (what) $$;
CREATE FUNCTION rbt_evil.nextval(regclass) RETURNS bigint LANGUAGE sql AS $$ SELECT rbt_evil.ran('nextval'); SELECT 424242::bigint $$;
CREATE FUNCTION rbt_evil.pg_current_xact_id() RETURNS xid8 LANGUAGE sql AS $$ SELECT rbt_evil.ran('pg_current_xact_id'); SELECT '1'::xid8 $$;
CREATE FUNCTION rbt_evil.hashtext(text) RETURNS integer LANGUAGE sql AS $$ SELECT rbt_evil.ran('hashtext'); SELECT 0 $$;
CREATE FUNCTION rbt_evil.octet_length(text) RETURNS integer LANGUAGE sql AS $$ SELECT rbt_evil.ran('octet_length'); SELECT 0 $$;
CREATE FUNCTION rbt_evil.bool_and_sfunc(boolean, boolean) RETURNS boolean LANGUAGE sql AS $$ SELECT rbt_evil.ran('bool_and'); SELECT true $$;
CREATE AGGREGATE rbt_evil.bool_and(boolean) (SFUNC = rbt_evil.bool_and_sfunc, STYPE = boolean);
CREATE FUNCTION rbt_evil.regex(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT rbt_evil.ran('~'); SELECT true $$;
CREATE OPERATOR rbt_evil.~ (LEFTARG = text, RIGHTARG = text, FUNCTION = rbt_evil.regex);
CREATE FUNCTION rbt_evil.le(integer, integer) RETURNS boolean LANGUAGE sql AS $$ SELECT rbt_evil.ran('<='); SELECT true $$;
CREATE OPERATOR rbt_evil.<= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = rbt_evil.le);
CREATE FUNCTION rbt_evil.band(integer, integer) RETURNS integer LANGUAGE sql AS $$ SELECT rbt_evil.ran('&'); SELECT 0 $$;
CREATE OPERATOR rbt_evil.& (LEFTARG = integer, RIGHTARG = integer, FUNCTION = rbt_evil.band);`)
	require.NoError(t, err)

	c, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	conn := c.Conn()
	planted := plantEverywhere(t, conn, s)
	_, err = conn.Exec(ctx, fmt.Sprintf(`SET search_path = rbt_evil, pg_catalog, %s; SET track_functions = 'all'`, pgx.Identifier{s}.Sanitize()))
	require.NoError(t, err)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := tx.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	value := func(dst any, sql string, args ...any) {
		t.Helper()
		require.NoError(t, tx.QueryRow(ctx, sql, args...).Scan(dst), sql)
	}
	refused := func(sql string) error {
		t.Helper()
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		_, err = sp.Exec(ctx, sql)
		require.Error(t, err, sql)
		require.NoError(t, sp.Rollback(ctx))
		return err
	}

	// 001, 017: the assign trigger, the CHECK's tag test, the notify
	// trigger, the immutable trigger; 011: the command's transaction id.
	var e1, last int64
	var xid, eventXid, commandXid string
	value(&xid, `SELECT pg_catalog.pg_current_xact_id()::text`)
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO `+q("riverbus_event")+` (type, key, tags, data)
		VALUES ('t', 'k1', '{a=b}', '{}') RETURNING global_sequence, transaction_id::text`).Scan(&e1, &eventXid))
	value(&last, `SELECT last_value FROM `+q("riverbus_event_global_sequence"))
	require.Equal(t, last, e1, "the event's number comes from riverbus's sequence")
	require.Equal(t, xid, eventXid)
	err = refused(`INSERT INTO ` + q("riverbus_event") + ` (type, tags, data) VALUES ('t', '{=b}', '{}')`)
	require.Equal(t, pgerrcode.CheckViolation, database.Code(err), "%v", err)
	value(&commandXid, `INSERT INTO `+q("riverbus_command")+` (type, data) VALUES ('c', '{}') RETURNING transaction_id::text`)
	require.Equal(t, xid, commandXid)
	exec(`UPDATE `+q("riverbus_event")+` SET key = 'k2' WHERE global_sequence = $1`, e1)
	err = refused(fmt.Sprintf(`UPDATE %s SET global_sequence = global_sequence + 100 WHERE global_sequence = %d`, q("riverbus_event"), e1))
	require.ErrorContains(t, err, "cannot be changed")
	var e2 int64
	value(&e2, `INSERT INTO `+q("riverbus_event")+` (type, data) VALUES ('t', '{}') RETURNING global_sequence`)

	// 012: a pool's lane lock rows.
	exec(`INSERT INTO ` + q("riverbus_pool") + ` (name, ordering, start_after, cursor_seq) VALUES ('ordered', 'key', 0, 0)`)
	var n int64
	value(&n, `SELECT count(*) FROM `+q("riverbus_lane_lock")+` WHERE pool = 'ordered'`)
	require.Equal(t, int64(128), n)

	// 023: River's pause of a pool's queue (River's default queue here)
	// pauses the pool; the queue made anew while its pool is paused starts
	// paused.
	exec(`INSERT INTO ` + q("river_queue") + ` (name, created_at, metadata, updated_at) VALUES ('default', now(), '{}', now())`)
	exec(`UPDATE ` + q("river_queue") + ` SET paused_at = now() WHERE name = 'default'`)
	var status string
	value(&status, `SELECT status FROM `+q("riverbus_pool")+` WHERE name = 'ordered'`)
	require.Equal(t, "paused", status)
	exec(`DELETE FROM ` + q("river_queue") + ` WHERE name = 'default'`)
	exec(`INSERT INTO ` + q("river_queue") + ` (name, created_at, metadata, updated_at) VALUES ('default', now(), '{}', now())`)
	var paused bool
	value(&paused, `SELECT paused_at IS NOT NULL FROM `+q("river_queue")+` WHERE name = 'default'`)
	require.True(t, paused)
	exec(`UPDATE ` + q("river_queue") + ` SET paused_at = NULL WHERE name = 'default'`)
	value(&status, `SELECT status FROM `+q("riverbus_pool")+` WHERE name = 'ordered'`)
	require.Equal(t, "active", status)

	// 003, 005, 009, 016: lanes hand on, dead letters are kept and leave
	// when retried, a deleted lane job releases its lane.
	var j1, j2, j3, j4 int64
	insertJob := func(seq int64, lane, state string) int64 {
		t.Helper()
		var id int64
		value(&id, `INSERT INTO `+q("river_job")+` (kind, args, metadata, queue, state, max_attempts, priority)
			VALUES ('ordered', jsonb_build_object('global_sequence', $1::bigint), jsonb_build_object('riverbus_lane', $2::text),
				'default', $3::text::river_job_state, 3, 1) RETURNING id`, seq, lane, state)
		return id
	}
	state := func(id int64) string {
		t.Helper()
		var st string
		value(&st, `SELECT state::text FROM `+q("river_job")+` WHERE id = $1`, id)
		return st
	}
	j1 = insertJob(e1, "k1", "running")
	j2 = insertJob(e2, "k1", "pending")
	exec(`UPDATE `+q("river_job")+` SET state = 'completed', finalized_at = now() WHERE id = $1`, j1)
	require.Equal(t, "available", state(j2), "the lane's next job released")
	exec(`UPDATE `+q("river_job")+` SET state = 'discarded', finalized_at = now() WHERE id = $1`, j2)
	value(&n, `SELECT count(*) FROM `+q("riverbus_dead_letter")+` WHERE job_id = $1`, j2)
	require.Equal(t, int64(1), n, "the dead letter kept")
	exec(`UPDATE `+q("river_job")+` SET state = 'available', finalized_at = NULL WHERE id = $1`, j2)
	value(&n, `SELECT count(*) FROM `+q("riverbus_dead_letter")+` WHERE job_id = $1`, j2)
	require.Zero(t, n, "a retried dead letter is no longer one")
	require.Equal(t, "available", state(j2))
	// 005, 014: the rescuer's discard becomes a retry.
	exec(`UPDATE `+q("river_job")+` SET state = 'running', attempt = 1 WHERE id = $1`, j2)
	exec(`UPDATE `+q("river_job")+` SET state = 'discarded', finalized_at = now(),
		errors = ARRAY['{"error": "Stuck job rescued by JobRescuer"}'::jsonb] WHERE id = $1`, j2)
	require.Equal(t, "retryable", state(j2))
	j3 = insertJob(e1, "k3", "available")
	exec(`DELETE FROM `+q("river_job")+` WHERE id = $1`, j3)
	var released *int64
	value(&released, `SELECT `+q("riverbus_release_lane")+`('ordered', 'k9')`)
	require.Nil(t, released, "a lane with no job")

	// 007: the retry of an undeliverable event's dead letter rebuilds its
	// envelope from the log.
	value(&j4, `INSERT INTO `+q("river_job")+` (kind, args, queue, state, max_attempts, priority, finalized_at)
		VALUES ('ordered', jsonb_build_object('global_sequence', $1::bigint, 'undeliverable', 'too deep'), 'default',
			'discarded', 3, 1, now()) RETURNING id`, e2)
	exec(`UPDATE `+q("river_job")+` SET state = 'available', finalized_at = NULL WHERE id = $1`, j4)
	var rebuilt bool
	value(&rebuilt, `SELECT args ? 'data' AND NOT args ? 'undeliverable' FROM `+q("river_job")+` WHERE id = $1`, j4)
	require.True(t, rebuilt)
	var envelope []byte
	value(&envelope, `SELECT `+q("riverbus_event_envelope")+`(ARRAY[$1::bigint])`, e1)
	require.Contains(t, string(envelope), `"key": "k2"`)
	require.Contains(t, string(envelope), `"version": 1`)

	// 012, 006: the horizon's lock and missing-row error.
	var locked bool
	value(&locked, `SELECT `+q("riverbus_horizon_try_lock")+`()`)
	require.True(t, locked)
	err = refused(`SELECT ` + q("riverbus_horizon_missing") + `()`)
	require.ErrorContains(t, err, "riverbus_horizon has no row")

	// 015: retention; the pool's cursor 0 holds everything.
	exec(`UPDATE ` + q("riverbus_retention") + ` SET enabled = true, keep = '0'`)
	var floor int64
	var stopped string
	value(&floor, `SELECT min(floor) FROM `+q("riverbus_retention_holds")+`()`)
	require.Zero(t, floor)
	require.NoError(t, tx.QueryRow(ctx, `SELECT floor, stopped_by FROM `+q("riverbus_retention_step")+`(0, NULL, NULL, 10, true)`).
		Scan(&floor, &stopped))
	require.Zero(t, floor)
	require.Equal(t, "floor", stopped)

	// 017: nothing above the sequence to renumber.
	value(&n, `SELECT count(*) FROM `+q("riverbus_event_renumber")+`()`)
	require.Zero(t, n)

	// 018: the private schema's name, its locks' holders, retention's start
	// lock and AppendIf's bucket rows.
	var private string
	value(&private, `SELECT `+q("riverbus_private_schema")+`()`)
	require.NotEmpty(t, private)
	value(&n, `SELECT count(*) FROM `+q("riverbus_horizon_lock_holders")+`()`)
	exec(`SELECT ` + q("riverbus_retention_start_lock") + `()`)
	var buckets int
	value(&buckets, `SELECT `+q("riverbus_append_if_lock")+`(ARRAY[1, 2]::bigint[], ARRAY[true, false])`)

	// 022: the schema check of every delivering transaction.
	exec(`SELECT `+q("riverbus_schema_check")+`($1)`, migrations.Newest())

	// 003: the lane's bucket and the unused lock class.
	var bucket, want int
	value(&bucket, `SELECT `+q("riverbus_lane_bucket")+`('k1')`)
	value(&want, `SELECT pg_catalog.hashtext('k1') OPERATOR(pg_catalog.&) 127`)
	require.Equal(t, want, bucket)
	value(&want, `SELECT `+q("riverbus_lane_lock_class")+`('ordered')`)

	// 020: the failover fence. On the server the horizon was recorded on
	// it does nothing; on another timeline (faked here) it renumbers the
	// events above the horizon and records the timeline, after which the
	// guard lets job writes through again.
	value(&n, `SELECT count(*) FROM `+q("riverbus_failover_fence")+`()`)
	require.Zero(t, n)
	exec(`UPDATE ` + q("riverbus_horizon") + ` SET timeline = timeline + 100`)
	err = refused(`UPDATE ` + q("river_job") + ` SET priority = 2 WHERE id = 0`)
	require.ErrorContains(t, err, "has not fenced yet")
	var renumbered int64
	value(&renumbered, `SELECT events_renumbered FROM `+q("riverbus_failover_fence")+`()`)
	require.Equal(t, int64(2), renumbered)
	exec(`UPDATE ` + q("river_job") + ` SET priority = 2 WHERE id = 0`)

	// What ran, and what did not.
	rows, err := tx.Query(ctx, `SELECT f.funcname::text FROM pg_stat_xact_user_functions f WHERE f.calls > 0`)
	require.NoError(t, err)
	called, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, f := range riverbusFunctions(t, db) {
		switch f.name {
		case "riverbus_lane_bucket": // may be inlined into its callers: not counted then
			continue
		case "riverbus_horizon_missing": // always raises, and its call is counted with its savepoint; its message showed
			continue
		}
		require.Contains(t, called, f.name, "%s is not exercised by this test", f.signature)
	}
	rows, err = tx.Query(ctx, `SELECT what FROM rbt_evil.ran`)
	require.NoError(t, err)
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, ran, "look-alikes on the caller's path ran")
	require.Empty(t, plantedUse(t, conn, planted), "planted temporary objects were used")
	require.NoError(t, tx.Rollback(ctx))
}

// An application login on a database that left TEMPORARY to PUBLIC plants a
// temporary sequence of the sequence's name, as the issue reproduced it:
// its events still get their numbers from riverbus's sequence, through the
// Go API and plain SQL alike.
func TestAppCannotChooseSequenceNumbers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	_, err := b.owner.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO PUBLIC', current_database());
	END $$`)
	require.NoError(t, err)
	app := b.login(t, "riverbus_app")
	c, err := app.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	_, err = c.Exec(ctx, `CREATE TEMP SEQUENCE riverbus_event_global_sequence START 1000`)
	require.NoError(t, err)
	// A closed session drops its temporary objects after the client has
	// gone, which may be after the role's DROP: drop them here.
	defer c.Exec(context.Background(), `DISCARD TEMP`) //nolint:errcheck

	appended, err := outbox.Append(ctx, c, outbox.Event{Type: "invoice.paid", Data: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.Equal(t, int64(1), appended[0].GlobalSequence)
	var seq int64
	require.NoError(t, c.QueryRow(ctx, `INSERT INTO riverbus_event (type, data) VALUES ('invoice.paid', '{}') RETURNING global_sequence`).Scan(&seq))
	require.Equal(t, int64(2), seq)
	var called bool
	require.NoError(t, c.QueryRow(ctx, `SELECT is_called FROM pg_temp.riverbus_event_global_sequence`).Scan(&called))
	require.False(t, called, "the planted sequence handed out a number")
}
