package migrations_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/checkpoint"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/deadletters"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/migrations"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

type rolesBundle struct {
	url   string
	owner *pgxpool.Pool // the superuser that migrated the database
}

// setupRoles gives the test a fresh migrated database in which PUBLIC has
// lost its default rights (USAGE and CREATE on the schema, EXECUTE on
// functions, CONNECT and TEMPORARY on the database), as a hardened
// installation would and docs/security.md ("Least privilege") says: what the roles can
// do there they can do by their own grants, and the database grants CONNECT
// to the two group roles, as that page's statements do.
func setupRoles(t *testing.T) *rolesBundle {
	t.Helper()
	b := setupDatabase(t, "REVOKE ALL ON SCHEMA %I FROM PUBLIC", "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC")
	_, err := b.owner.Exec(context.Background(), `DO $$
BEGIN
  EXECUTE format('REVOKE CONNECT, TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO riverbus_app, riverbus_worker', current_database());
END
$$`)
	require.NoError(t, err)
	return b
}

// setupDatabase gives the test a fresh migrated database after running
// each of statements, formatted with the name of the schema riverbus is
// installed in.
func setupDatabase(t *testing.T, statements ...string) *rolesBundle {
	t.Helper()
	url := pgtest.NewDatabase(t)
	owner := pgtest.Connect(t, url)
	for _, stmt := range statements {
		var sql string
		require.NoError(t, owner.QueryRow(context.Background(), `SELECT format($1, current_schema())`, stmt).Scan(&sql))
		_, err := owner.Exec(context.Background(), sql)
		require.NoError(t, err)
	}
	return &rolesBundle{url: url, owner: owner}
}

// login creates a LOGIN role in group (none when group is empty; roles are
// cluster-wide, so its name is unique and it is dropped when the test ends)
// and returns a pool connected to the test database as that role.
func (b *rolesBundle) login(t *testing.T, group string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	name := "rbt_" + cmp.Or(strings.TrimPrefix(group, "riverbus_"), "nobody") + "_" + randomHex(t, 6)
	password := randomHex(t, 16) // for servers that do not trust 127.0.0.1
	ident := pgx.Identifier{name}.Sanitize()
	inRole := ""
	if group != "" {
		inRole = " IN ROLE " + pgx.Identifier{group}.Sanitize()
	}
	// Utility statements take no parameters; both names and the hex password
	// are made here.
	_, err := b.owner.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'%s", ident, password, inRole))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.owner.Exec(ctx, "DROP ROLE IF EXISTS "+ident); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(b.url)
	require.NoError(t, err)
	cfg.ConnConfig.User = name
	cfg.ConnConfig.Password = password
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // runs before the role is dropped
	var user string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_user").Scan(&user))
	require.Equal(t, name, user)
	return pool
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// requireDenied runs each statement on its own and requires it to fail with
// insufficient_privilege (permission denied, and "must be owner of" for
// DDL).
func requireDenied(t *testing.T, db *pgxpool.Pool, statements ...string) {
	t.Helper()
	for _, sql := range statements {
		_, err := db.Exec(context.Background(), sql)
		require.Equal(t, pgerrcode.InsufficientPrivilege, database.Code(err), "%s: want insufficient_privilege, got %v", sql, err)
	}
}

// TestRolesGrants pins down what each group role was granted directly: any
// change to it is deliberate.
func TestRolesGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)

	for _, role := range []string{"riverbus_app", "riverbus_worker"} {
		var login, super, createRole, createDB, bypassRLS bool
		require.NoError(t, b.owner.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls
			FROM pg_roles WHERE rolname = $1`, role).Scan(&login, &super, &createRole, &createDB, &bypassRLS))
		require.False(t, login || super || createRole || createDB || bypassRLS, role)

		var owns int
		require.NoError(t, b.owner.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_class WHERE relowner = $1::regrole) +
			(SELECT count(*) FROM pg_proc WHERE proowner = $1::regrole) +
			(SELECT count(*) FROM pg_namespace WHERE nspowner = $1::regrole) +
			(SELECT count(*) FROM pg_type WHERE typowner = $1::regrole)`, role).Scan(&owns))
		require.Zero(t, owns, "%s owns objects", role)

		var schemaCreate, schemaUsage bool
		require.NoError(t, b.owner.QueryRow(ctx, `SELECT has_schema_privilege($1, current_schema(), 'CREATE'),
			has_schema_privilege($1, current_schema(), 'USAGE')`, role).Scan(&schemaCreate, &schemaUsage))
		require.False(t, schemaCreate, role)
		require.True(t, schemaUsage, role)
	}

	var serverVersion int
	require.NoError(t, b.owner.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&serverVersion))
	workerJobPrivileges := "DELETE,INSERT,SELECT,UPDATE"
	if serverVersion >= 170000 {
		workerJobPrivileges = "DELETE,INSERT,MAINTAIN,SELECT,UPDATE"
	}
	want := map[string]map[string]string{
		"riverbus_app": {
			"riverbus_backfill":              "INSERT,SELECT,UPDATE",
			"riverbus_command":               "INSERT,SELECT",
			"riverbus_event":                 "INSERT,SELECT",
			"riverbus_event_global_sequence": "USAGE",
			"riverbus_migration":             "SELECT",
		},
		"riverbus_worker": {
			"river_job":                      workerJobPrivileges,
			"river_job_id_seq":               "SELECT,USAGE",
			"river_leader":                   "DELETE,INSERT,SELECT,UPDATE",
			"river_migration":                "SELECT",
			"river_notification":             "DELETE,INSERT,SELECT,UPDATE",
			"river_notification_id_seq":      "SELECT,USAGE",
			"river_queue":                    "DELETE,INSERT,SELECT,UPDATE",
			"riverbus_command":               "SELECT",
			"riverbus_dead_letter":           "DELETE,INSERT,SELECT,UPDATE",
			"riverbus_event":                 "SELECT",
			"riverbus_event_global_sequence": "SELECT",
			"riverbus_failover":              "SELECT",
			"riverbus_gap":                   "DELETE,INSERT,SELECT",
			"riverbus_horizon":               "SELECT,UPDATE",
			"riverbus_horizon_mark":          "DELETE,INSERT,SELECT",
			"riverbus_horizon_lock":          "UPDATE",
			"riverbus_lane_lock":             "SELECT,UPDATE",
			"riverbus_migration":             "SELECT",
			"riverbus_pool":                  "SELECT",
			"columns of riverbus_pool":       "UPDATE",
			"riverbus_pool_checkpoint":       "INSERT,SELECT,UPDATE",
			"riverbus_late":                  "DELETE,INSERT,SELECT",
			"riverbus_pool_late":             "DELETE,INSERT,SELECT",
			"riverbus_pool_start":            "INSERT,SELECT,UPDATE",
			"riverbus_process":               "DELETE,INSERT,SELECT,UPDATE",
			"riverbus_process_error":         "DELETE,INSERT,SELECT,UPDATE",
			"riverbus_retention":             "SELECT",
			"riverbus_retention_lock":        "UPDATE",
			"riverbus_skipped":               "DELETE,INSERT,SELECT",
		},
	}
	for role, wantGrants := range want {
		rows, err := b.owner.Query(ctx, `
SELECT c.relname, string_agg(a.privilege_type, ',' ORDER BY a.privilege_type)
FROM pg_class c, aclexplode(c.relacl) a
WHERE a.grantee = $1::regrole
GROUP BY c.relname
UNION ALL
SELECT 'columns of ' || c.relname, string_agg(DISTINCT a.privilege_type, ',')
FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid, aclexplode(att.attacl) a
WHERE a.grantee = $1::regrole
GROUP BY c.relname`, role)
		require.NoError(t, err)
		got := map[string]string{}
		for rows.Next() {
			var object, privileges string
			require.NoError(t, rows.Scan(&object, &privileges))
			got[object] = privileges
		}
		require.NoError(t, rows.Err())
		require.Equal(t, wantGrants, got, role)
	}

	// Functions: the application calls riverbus_tags_valid (riverbus_event's
	// CHECK); the worker every riverbus and River function of the schema.
	functions := func(role string) []string {
		rows, err := b.owner.Query(ctx, `SELECT p.proname FROM pg_proc p, aclexplode(p.proacl) a
			WHERE a.grantee = $1::regrole AND a.privilege_type = 'EXECUTE' ORDER BY p.proname`, role)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	require.Equal(t, []string{"riverbus_append_if_lock", "riverbus_private_schema", "riverbus_tags_valid"}, functions("riverbus_app"))
	rows, err := b.owner.Query(ctx, `SELECT proname FROM pg_proc
		WHERE pronamespace = current_schema()::regnamespace AND (proname LIKE 'riverbus\_%' OR proname LIKE 'river\_%')
		ORDER BY proname`)
	require.NoError(t, err)
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, all, "riverbus_tags_valid")
	require.Contains(t, all, "river_job_state_in_bitmask")
	require.Equal(t, all, functions("riverbus_worker"))
}

// TestAppRole: an application login can append and read events and record
// commands through the outbox package, and nothing else.
func TestAppRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	app := b.login(t, "riverbus_app")

	appended, err := outbox.Append(ctx, app, outbox.Event{
		Type: "invoice.paid", Key: "inv-1", Tags: []string{"customer=7"}, Data: json.RawMessage(`{"cents":100}`),
	})
	require.NoError(t, err)
	require.Len(t, appended, 1)

	// A plain INSERT, as psql or another language would: the trigger, run
	// with the app's rights, assigns the sequence and the xid.
	var seq int64
	require.NoError(t, app.QueryRow(ctx,
		`INSERT INTO riverbus_event (type, key, data) VALUES ('invoice.paid', 'inv-2', '{}') RETURNING global_sequence`).Scan(&seq))
	require.Equal(t, appended[0].GlobalSequence+1, seq)

	// A conditional append (advisory locks, the condition reads the log)
	// inside a transaction that also records its command.
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if err := outbox.RecordCommandTx(ctx, tx, outbox.Command{Type: "pay", Data: json.RawMessage(`{"invoice":"inv-3"}`)}); err != nil {
			return err
		}
		_, err := outbox.AppendIfTx(ctx, tx, outbox.AppendCondition{
			FailIfEventsMatch: outbox.Query{{Tags: []string{"customer=7"}}},
			After:             appended[0].GlobalSequence,
		}, outbox.Event{Type: "invoice.paid", Key: "inv-3", Tags: []string{"customer=7"}, Data: json.RawMessage(`{}`)})
		return err
	})
	require.NoError(t, err)
	_, err = outbox.AppendIf(ctx, app, outbox.AppendCondition{
		FailIfEventsMatch: outbox.Query{{Tags: []string{"customer=7"}}},
		After:             appended[0].GlobalSequence,
	}, outbox.Event{Type: "invoice.paid", Key: "inv-4", Tags: []string{"customer=7"}, Data: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, outbox.ErrConflict)

	events, err := outbox.Read(ctx, app, outbox.ReadParams{})
	require.NoError(t, err)
	require.Len(t, events, 3)
	var commands int
	require.NoError(t, app.QueryRow(ctx, `SELECT count(*) FROM riverbus_command c
		JOIN riverbus_event e USING (transaction_id) WHERE e.key = 'inv-3'`).Scan(&commands))
	require.Equal(t, 1, commands)
	version, err := migrations.Version(ctx, app)
	require.NoError(t, err)
	require.Positive(t, version)

	// A forged audit record: the app names another transaction (here one
	// that has its id and has not recorded its command yet). The database
	// files the record under the inserter's own transaction instead, and
	// the named transaction records its command as usual.
	victim, err := app.Begin(ctx)
	require.NoError(t, err)
	defer victim.Rollback(ctx) //nolint:errcheck
	var victimXid, forgerXid string
	require.NoError(t, victim.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&victimXid))
	require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO riverbus_command (transaction_id, type, data) VALUES ($1::text::xid8, 'forged', '{}')
			RETURNING transaction_id::text`, victimXid).Scan(&forgerXid); err != nil {
			return err
		}
		return nil
	}))
	require.NotEqual(t, victimXid, forgerXid)
	// Nor can anyone move a record to another transaction later.
	_, err = b.owner.Exec(ctx, `UPDATE riverbus_command SET transaction_id = $1::text::xid8 WHERE transaction_id = $2::text::xid8`,
		victimXid, forgerXid)
	require.ErrorContains(t, err, "transaction_id cannot be changed")
	require.NoError(t, outbox.RecordCommandTx(ctx, victim, outbox.Command{Type: "pay", Data: json.RawMessage(`{}`)}))
	require.NoError(t, victim.Commit(ctx))

	requireDenied(t, app,
		// River's tables.
		`SELECT id FROM river_job`,
		`INSERT INTO river_job (kind, args, max_attempts, priority, queue, state) VALUES ('billing', '{}', 1, 1, 'default', 'available')`,
		`UPDATE river_job SET priority = 1`,
		`DELETE FROM river_job`,
		`SELECT name FROM river_queue`,
		// The fan-out's tables.
		`SELECT name FROM riverbus_pool`,
		`INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ('billing', 0, 0)`,
		`UPDATE riverbus_pool SET cursor_seq = 0`,
		`SELECT horizon FROM riverbus_horizon`,
		`UPDATE riverbus_horizon SET horizon = 0`,
		`SELECT first_sequence FROM riverbus_gap`,
		`SELECT pool FROM riverbus_pool_checkpoint`,
		`SELECT job_id FROM riverbus_dead_letter`,
		`DELETE FROM riverbus_dead_letter`,
		// The log is append-only for the application.
		`UPDATE riverbus_event SET key = 'changed'`,
		`DELETE FROM riverbus_event`,
		`TRUNCATE riverbus_event`,
		`DELETE FROM riverbus_command`,
		`SELECT setval('riverbus_event_global_sequence', 1)`,
		// The schema.
		`DROP TABLE riverbus_event`,
		`ALTER TABLE riverbus_event ADD COLUMN extra int`,
		`ALTER TABLE riverbus_event DISABLE TRIGGER riverbus_event_assign`,
		`DROP TRIGGER riverbus_event_assign ON riverbus_event`,
		`CREATE TABLE app_table (id int)`,
		// Nor a temporary sequence or table, which a function resolving
		// an unqualified name would find first (migration 017).
		`CREATE TEMP SEQUENCE riverbus_event_global_sequence START 1000`,
		`CREATE TEMP TABLE riverbus_pool (name text)`,
	)
}

// TestAppRoleBackfills: an application login backfills its own rows (it
// keeps the backfill's progress row); the worker role may not touch the
// progress rows.
func TestAppRoleBackfills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	app := b.login(t, "riverbus_app")
	worker := b.login(t, "riverbus_worker")
	_, err := b.owner.Exec(ctx, `CREATE TABLE customers AS SELECT i AS id, 'c' || i AS name FROM generate_series(1, 25) AS i;
		GRANT SELECT ON customers TO riverbus_app`)
	require.NoError(t, err)

	st, err := outbox.Backfill(ctx, app, outbox.BackfillParams{Type: "customer.imported", BatchSize: 10, Count: true,
		Query: `SELECT id, name AS key, jsonb_build_object('name', name) AS data FROM customers`})
	require.NoError(t, err)
	require.Equal(t, int64(25), st.Appended)
	require.True(t, st.Finished)

	requireDenied(t, worker,
		`SELECT name FROM riverbus_backfill`,
		`UPDATE riverbus_backfill SET last_id = NULL`,
	)
	// Progress rows are never deleted by a backfill: the application may
	// not delete them either (a lost row costs a run from the start, which
	// appends nothing twice).
	requireDenied(t, app, `DELETE FROM riverbus_backfill`)
}

// billingArgs are the args of the jobs of pool "billing".
type billingArgs struct{ workers.Args }

func (billingArgs) Kind() string { return "billing" }

// billingWorker fails the first attempt of events whose data says so.
type billingWorker struct {
	river.WorkerDefaults[billingArgs]
}

func (w *billingWorker) Work(_ context.Context, job *river.Job[billingArgs]) error {
	var data struct {
		Fail bool `json:"fail"`
	}
	if err := json.Unmarshal(job.Args.Data, &data); err != nil {
		return err
	}
	if data.Fail && job.Attempt == 1 {
		return errors.New("first attempt fails")
	}
	return nil
}

// deniedLog records log lines that mention a missing privilege.
type deniedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *deniedLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *deniedLog) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	if strings.Contains(line, "permission denied") || strings.Contains(line, "must be owner") || strings.Contains(line, "SQLSTATE 42501") {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
	return nil
}

func (l *deniedLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *deniedLog) WithGroup(string) slog.Handler      { return l }

func (l *deniedLog) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// TestWorkerRole runs the real path as a worker login: the fan-out turns
// events an application login appended into jobs, a River client works them,
// a discarded job becomes a dead letter and is retried, and the checkpoint
// advances; DDL and appends stay out of reach.
func TestWorkerRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)

	// Pools are created by the owner, like migrations.
	_, _, err := pools.Create(ctx, b.owner, bustype.PoolParams{Name: "billing", MaxAttempts: 1})
	require.NoError(t, err)

	app := b.login(t, "riverbus_app")
	var events []outbox.Event
	for i, fail := range []bool{false, true, false} {
		events = append(events, outbox.Event{
			Type: "invoice.paid", Key: fmt.Sprintf("inv-%d", i), Data: json.RawMessage(fmt.Sprintf(`{"fail":%t}`, fail)),
		})
	}
	appended, err := outbox.Append(ctx, app, events...)
	require.NoError(t, err)
	last := appended[len(appended)-1].GlobalSequence

	worker := b.login(t, "riverbus_worker")
	logs := &deniedLog{}
	logger := slog.New(logs)

	f, err := fanout.New(worker, &fanout.Config{Logger: logger})
	require.NoError(t, err)
	pass, err := f.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, pass.Jobs)
	var cursor int64
	require.NoError(t, worker.QueryRow(ctx, `SELECT cursor_seq FROM riverbus_pool WHERE name = 'billing'`).Scan(&cursor))
	require.Equal(t, last, cursor)

	ws := river.NewWorkers()
	river.AddWorker(ws, &billingWorker{})
	cfg, err := workers.RiverConfig(workers.RiverOpts{Queues: map[string]int{bustype.DefaultQueue("billing"): 3}, Workers: ws, Config: workers.Config{Logger: logger}})
	require.NoError(t, err)
	client, err := river.NewClient(workers.NewDriver(worker, cfg.Logger), cfg)
	require.NoError(t, err)
	finished, cancelSubscription := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancelSubscription()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})
	waitFor := func(n int) map[rivertype.JobState]int {
		t.Helper()
		states := map[rivertype.JobState]int{}
		timeout := time.After(30 * time.Second)
		for range n {
			select {
			case e := <-finished:
				states[e.Job.State]++
			case <-timeout:
				t.Fatalf("jobs finished: %v, want %d; denied: %q", states, n, logs.Lines())
			}
		}
		return states
	}
	require.Equal(t, map[rivertype.JobState]int{rivertype.JobStateCompleted: 2, rivertype.JobStateDiscarded: 1}, waitFor(3))

	// The discarded job was kept by the dead-letter trigger, which ran with
	// the worker's rights.
	dead, err := deadletters.List(ctx, worker, bustype.DeadLetterListParams{Pool: "billing"})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, appended[1].GlobalSequence, dead[0].GlobalSequence)
	checkpointSeq, err := checkpoint.Advance(ctx, worker, "billing")
	require.NoError(t, err)
	require.Equal(t, last, checkpointSeq)

	retried, err := deadletters.Retry(ctx, worker, dead[0].JobID)
	require.NoError(t, err)
	require.Equal(t, bustype.RetryRequeued, retried.Action)
	require.Equal(t, map[rivertype.JobState]int{rivertype.JobStateCompleted: 1}, waitFor(1))
	dead, err = deadletters.List(ctx, worker, bustype.DeadLetterListParams{Pool: "billing"})
	require.NoError(t, err)
	require.Empty(t, dead)

	// Pausing, resuming and resetting is the worker's too; creating pools
	// and changing what they are is not.
	_, _, err = pools.SetStatus(ctx, worker, "billing", bustype.PoolPaused)
	require.NoError(t, err)
	_, _, err = pools.SetStatus(ctx, worker, "billing", bustype.PoolActive)
	require.NoError(t, err)
	_, err = pools.Reset(ctx, worker, "billing", 0)
	require.NoError(t, err)
	var updatable []string
	rows, err := b.owner.Query(ctx, `SELECT a.attname FROM pg_attribute a
		WHERE a.attrelid = 'riverbus_pool'::regclass AND a.attnum > 0 AND NOT a.attisdropped
			AND has_column_privilege('riverbus_worker', 'riverbus_pool', a.attname, 'UPDATE') ORDER BY a.attname`)
	require.NoError(t, err)
	updatable, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"cursor_seq", "events_fanned_out", "late_events_delivered", "start_after", "status", "updated_at"}, updatable)

	requireDenied(t, worker,
		// The schema.
		`DROP TABLE river_job`,
		`ALTER TABLE riverbus_pool ADD COLUMN extra int`,
		`ALTER TABLE river_job DISABLE TRIGGER riverbus_dead_letter_keep`,
		`CREATE INDEX ON river_job (kind)`,
		`DROP FUNCTION riverbus_dead_letter_keep()`,
		`CREATE TABLE worker_table (id int)`,
		`TRUNCATE riverbus_event`,
		`TRUNCATE river_job`,
		// The log is the applications' to append to, and nobody's to change.
		`INSERT INTO riverbus_event (type, data) VALUES ('invoice.paid', '{}')`,
		`UPDATE riverbus_event SET key = 'changed'`,
		`DELETE FROM riverbus_event`,
		`INSERT INTO riverbus_command (type, data) VALUES ('pay', '{}')`,
		`SELECT setval('riverbus_event_global_sequence', 1)`,
		// Pools are created, changed and deleted by the owner.
		`INSERT INTO riverbus_pool (name, start_after, cursor_seq) VALUES ('other', 0, 0)`,
		`DELETE FROM riverbus_pool`,
		`UPDATE riverbus_pool SET name = 'renamed'`,
		`UPDATE riverbus_pool SET queue = 'other'`,
		`UPDATE riverbus_pool SET event_types = '{spam}', tags = '{}'`,
		`UPDATE riverbus_pool SET ordering = 'none', grouping = 'none', on_dead_letter = 'release'`,
		`UPDATE riverbus_pool SET max_attempts = 1, priority = 4`,
	)
	require.Empty(t, logs.Lines())
}

// TestRolesCreatedConcurrently: a migration whose CREATE ROLE runs while
// another database's migration has created the same role but not yet
// committed waits for it and then carries on. It needs a server of its own:
// the roles are dropped first, and roles are cluster-wide.
func TestRolesCreatedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, url := pgtest.NewServer(t) // its database "postgres" is migrated
	admin := pgtest.Connect(t, url)
	_, err := admin.Exec(ctx, `DROP OWNED BY riverbus_app, riverbus_worker`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `DROP ROLE riverbus_app, riverbus_worker`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE racing`)
	require.NoError(t, err)

	// The other migration, caught between its CREATE ROLE and its commit.
	other, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx) //nolint:errcheck
	_, err = other.Exec(ctx, `CREATE ROLE riverbus_app NOLOGIN`)
	require.NoError(t, err)

	db := pgtest.Connect(t, srv.URL("racing"))
	done := make(chan error, 1)
	go func() {
		_, err := migrations.Up(ctx, db)
		done <- err
	}()
	// Wait until the migration waits for the other transaction.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var waiting bool
		require.NoError(t, admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = 'racing' AND wait_event_type = 'Lock' AND wait_event = 'transactionid')`).Scan(&waiting))
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("migration ended without waiting for the other one: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "migration never waited for the other one")
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, other.Commit(ctx))
	require.NoError(t, <-done)

	var granted bool
	require.NoError(t, db.QueryRow(ctx, `SELECT has_table_privilege('riverbus_app', 'riverbus_event', 'INSERT')
		AND has_table_privilege('riverbus_worker', 'river_job', 'UPDATE')`).Scan(&granted))
	require.True(t, granted)
}

// grantTable renders what each group role was granted on tables, sequences
// and columns, as the table of docs/security.md ("What each role was granted").
func grantTable(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	rows, err := db.Query(context.Background(), `
SELECT r.rolname, o.object, o.privileges FROM pg_roles r, LATERAL (
	-- MAINTAIN (PostgreSQL 17 and later, on river_job) is left out: the
	-- table is the same on every server version.
	SELECT c.relname::text AS object, string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type) AS privileges
	FROM pg_class c, aclexplode(c.relacl) a
	WHERE a.grantee = r.oid AND c.relnamespace = current_schema()::regnamespace AND a.privilege_type <> 'MAINTAIN'
	GROUP BY c.relname
	UNION ALL
	SELECT c.relname::text || ' (' || string_agg(DISTINCT att.attname::text, ', ') || ')',
		string_agg(DISTINCT a.privilege_type, ', ')
	FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid, aclexplode(att.attacl) a
	WHERE a.grantee = r.oid AND c.relnamespace = current_schema()::regnamespace
	GROUP BY c.relname
	UNION ALL
	-- The install's private schema (migration 018), whatever its name.
	SELECT 'schema riverbus_private_<schema>', string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type)
	FROM pg_namespace n, aclexplode(n.nspacl) a
	WHERE a.grantee = r.oid AND n.nspname = riverbus_private_schema()
	GROUP BY n.nspname
	UNION ALL
	SELECT 'riverbus_private_<schema>.' || c.relname, string_agg(a.privilege_type, ', ' ORDER BY a.privilege_type)
	FROM pg_class c, aclexplode(c.relacl) a
	WHERE a.grantee = r.oid AND c.relnamespace = riverbus_private_schema()::regnamespace
	GROUP BY c.relname
) o
WHERE r.rolname IN ('riverbus_app', 'riverbus_worker')
ORDER BY r.rolname, o.object`)
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString("| role | object | privileges |\n| --- | --- | --- |\n")
	var role, object, privileges string
	_, err = pgx.ForEachRow(rows, []any{&role, &object, &privileges}, func() error {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", role, object, privileges)
		return nil
	})
	require.NoError(t, err)
	return b.String()
}

// TestDocsGrantTableMatchesGrants keeps the table of docs/security.md of what
// each role may touch equal to what the migrations grant. To update the page,
// paste the table this test prints on failure.
func TestDocsGrantTableMatchesGrants(t *testing.T) {
	t.Parallel()
	b := setupRoles(t)
	want := grantTable(t, b.owner)
	page, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	const begin, end = "<!-- grants: generated by migrations' TestDocsGrantTableMatchesGrants -->\n", "<!-- end grants -->"
	text := string(page)
	i := strings.Index(text, begin)
	require.NotEqual(t, -1, i, "docs/security.md has no %q marker", begin)
	j := strings.Index(text[i:], end)
	require.NotEqual(t, -1, j, "docs/security.md has no %q marker", end)
	require.Equal(t, want, text[i+len(begin):i+j], "docs/security.md's grant table is stale; it should be:\n%s", want)
}

// An application login holds every advisory lock riverbus once depended on
// (the horizon round's, every lane bucket of an ordered pool), for as long
// as it likes. Delivery goes on: the round and the lanes take locks only
// riverbus_worker may take, and the app is refused those.
func TestAppCannotStopHorizonOrLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupRoles(t)
	app := b.login(t, "riverbus_app")
	worker := b.login(t, "riverbus_worker")
	_, _, err := pools.Create(ctx, b.owner, bustype.PoolParams{Name: "orders", Ordering: bustype.OrderingKey})
	require.NoError(t, err)

	hold, err := app.Acquire(ctx)
	require.NoError(t, err)
	defer hold.Release()
	_, err = hold.Exec(ctx, `SELECT pg_advisory_lock(1919054195, 1752134249)`)
	require.NoError(t, err)
	_, err = hold.Exec(ctx, `SELECT count(pg_advisory_lock(hashtext('riverbus.lane:orders'), b)) FROM generate_series(0, 127) AS b`)
	require.NoError(t, err)
	defer hold.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`) //nolint:errcheck
	// The locks that replaced them are out of its reach.
	var private string
	require.NoError(t, b.owner.QueryRow(ctx, `SELECT riverbus_private_schema()`).Scan(&private))
	for _, sql := range []string{
		`LOCK TABLE ` + pgx.Identifier{private, "riverbus_horizon_lock"}.Sanitize() + ` IN EXCLUSIVE MODE`,
		`SELECT riverbus_horizon_try_lock()`,
		`SELECT 1 FROM riverbus_lane_lock FOR UPDATE`,
		`SELECT 1 FROM riverbus_lane_lock FOR KEY SHARE`,
	} {
		err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, sql); return err })
		require.Contains(t, []string{pgerrcode.InsufficientPrivilege, pgerrcode.UndefinedFunction}, database.Code(err), "%s: %v", sql, err)
	}

	// The round's lock assigns no xid (docs/design.md §2.6): the gap proof needs
	// the round's xid to come from its first write, after its snapshot.
	require.NoError(t, pgx.BeginFunc(ctx, worker, func(tx pgx.Tx) error {
		var locked bool
		var xid *string
		if err := tx.QueryRow(ctx, `SELECT riverbus_horizon_try_lock()`).Scan(&locked); err != nil {
			return err
		}
		require.True(t, locked)
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid); err != nil {
			return err
		}
		require.Nil(t, xid, "the round's lock assigned an xid")
		return nil
	}))

	for range 2 {
		_, err := outbox.Append(ctx, app, outbox.Event{Type: "order.placed", Key: "c1", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	f, err := fanout.New(worker, &fanout.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	passCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pass, err := f.Pass(passCtx)
	require.NoError(t, err)
	require.True(t, pass.Horizon.Locked, "the round ran")
	require.EqualValues(t, 2, pass.Horizon.Horizon)
	states := func() map[int64]string {
		rows, err := worker.Query(ctx, `SELECT (args->>'global_sequence')::bigint, state FROM river_job WHERE kind = 'orders'`)
		require.NoError(t, err)
		m := map[int64]string{}
		var seq int64
		var state string
		_, err = pgx.ForEachRow(rows, []any{&seq, &state}, func() error { m[seq] = state; return nil })
		require.NoError(t, err)
		return m
	}
	require.Equal(t, map[int64]string{1: "available", 2: "pending"}, states())

	// Completing the key's job releases the next one, as River's completer
	// does, without waiting for the app's locks.
	tx, err := worker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL statement_timeout = '10s'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
		WHERE kind = 'orders' AND (args->>'global_sequence')::bigint = 1`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, map[int64]string{1: "completed", 2: "available"}, states())
}
