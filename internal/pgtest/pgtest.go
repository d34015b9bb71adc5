// Package pgtest gives each test its own database on a real PostgreSQL.
//
// A package's TestMain calls Main, which finds the test server, migrates a
// template database once per schema, and cleans up when the tests end, also
// on SIGINT or SIGTERM. NewDatabase and NewPool then create a fresh database
// from the template (tens of milliseconds idle, a second or two busy).
// Tests that need a server of their own, one they restart, crash,
// configure or stand a replica beside, call NewServer.
//
// # The shared server
//
// Every test binary of one module and one user shares one throwaway server,
// so `go test ./...` runs initdb once rather than once per package. The
// binaries find it through a directory keyed by the module root and the
// user id (riverbus-pgtest-UID-HASH in the temporary directory, private to
// the user), with no setup: a Makefile that started a server and passed its
// URL down would leave a bare `go test ./...` starting one per package, and
// a server nobody stops.
//
// The first binary that finds no server starts a supervisor: itself again,
// in a session of its own, which starts the server as its child (with a
// parent-death signal, so the server cannot outlive it) and writes the URL
// to server.json. Each binary using the server holds a shared flock on
// users.lock, which the kernel releases when the binary exits, however it
// exits (kill -9 included); it also registers the go command that runs it,
// since `go test ./...` leaves gaps between binaries while it builds the
// next. The supervisor stops the server as soon as no binary holds the lock
// and no registered go command runs: a server nobody uses stops within a
// fraction of a second, and none is left after the run. start.lock orders a
// binary's attach against the supervisor's check, so none attaches to a
// server that is stopping. A server that crashed is replaced by the next
// binary to start.
//
// Databases are per test and roles are the migrations' (the same on every
// database), so sharing changes nothing a test sees but what is
// server-wide: a test reading pg_stat_activity or pg_locks filters on its
// own database. RIVERBUS_TEST_OWN_SERVER=1 gives each binary its own server
// again; RIVERBUS_TEST_DATABASE_URL points the tests at an existing server.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus/internal/pgserver"
	"github.com/riverbus/riverbus/migrations"
)

// EnvURL names the variable that points the tests at an existing server. The
// URL's user must be allowed to create databases.
const EnvURL = "RIVERBUS_TEST_DATABASE_URL"

var (
	adminURL string           // URL of a maintenance database on the test server
	server   *pgserver.Server // this binary's own server (EnvOwnServer)
	shared   bool             // adminURL is the shared server's
	template string
	counter  atomic.Int64
	prefix   string
	setupMu  sync.Mutex
)

// TB is what the helpers need of a test: testing.TB has it, and so can an
// Example or a TestMain (a Fatalf that panics, cleanups run at the end).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(f func())
}

// Main runs the package's tests against a real PostgreSQL and exits.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that has more to clean up.
func Run(m *testing.M) int {
	ctx := context.Background()
	if err := setup(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "pgtest: %s: stopping the test server\n", sig)
		teardown()
		os.Exit(1)
	}()
	code := m.Run()
	signal.Stop(sigs)
	teardown()
	return code
}

func setup(ctx context.Context) error {
	switch {
	case os.Getenv(EnvURL) != "":
		adminURL = os.Getenv(EnvURL)
	case os.Getenv(EnvOwnServer) == "1":
		srv, err := pgserver.Start(ctx, pgserver.Opts{})
		if err != nil {
			return err
		}
		server = srv
		adminURL = srv.URL("postgres")
	default:
		u, err := attachShared(ctx)
		if err != nil {
			return err
		}
		shared = true
		adminURL = u
	}
	prefix = fmt.Sprintf("rbt_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	name, err := ensureTemplate(ctx)
	if err != nil {
		teardown()
		return err
	}
	template = name
	return nil
}

func teardown() {
	if server != nil {
		_ = server.Stop()
		return
	}
	// A shared or external server: drop what this process created.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", prefix+"%")
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, n := range names {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
}

// ensureTemplate creates the migrated template database once per schema
// version; its name carries a hash of the migrations, so a schema change
// gets a new template on a shared server.
func ensureTemplate(ctx context.Context) (string, error) {
	all, err := migrations.All()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		h.Write([]byte(m.SQL))
	}
	name := "riverbus_template_" + hex.EncodeToString(h.Sum(nil))[:12]

	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to test server: %w", err)
	}
	defer conn.Close(ctx)
	// Several test binaries may share one external server.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7263, 1)"); err != nil {
		return "", err
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock(7263, 1)") //nolint:errcheck

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	pool, err := pgxpool.New(ctx, pgserver.WithDatabase(adminURL, name))
	if err != nil {
		return "", err
	}
	_, err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true"); err != nil {
		return "", err
	}
	return name, nil
}

// NewDatabase creates a fresh, migrated database for the test and returns its
// URL. The database is dropped when the test ends.
func NewDatabase(t TB) string {
	t.Helper()
	if template == "" {
		t.Fatalf("pgtest: no test server: call riverbustest.Main(m) (or pgtest.Main) from TestMain")
	}
	return createDatabase(t, " TEMPLATE "+pgx.Identifier{template}.Sanitize())
}

// NewPool creates a fresh, migrated database for the test and returns a pool
// connected to it. The pool is closed and the database dropped when the test
// ends.
func NewPool(t TB) *pgxpool.Pool {
	t.Helper()
	return Connect(t, NewDatabase(t))
}

// NewEmptyDatabase creates a database with no schema at all, for tests of the
// migrations themselves, and returns its URL.
func NewEmptyDatabase(t TB) string {
	t.Helper()
	if adminURL == "" {
		t.Fatalf("pgtest: no test server: call riverbustest.Main(m) (or pgtest.Main) from TestMain")
	}
	return createDatabase(t, "")
}

// CopyDatabase creates a copy of the database at url (CREATE DATABASE ...
// TEMPLATE), dropped when the test ends, and returns the copy's URL: a
// state built once, copied for each test that starts from it. Nothing may
// be connected to url meanwhile (createDatabase waits out a session that
// leaves within seconds).
func CopyDatabase(t TB, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse url: %v", err)
	}
	return createDatabase(t, " TEMPLATE "+pgx.Identifier{cfg.Database}.Sanitize())
}

// createDatabase creates a database with a unique name (CREATE DATABASE
// name + clause), drops it when the test ends, and returns its URL. A
// template another session is still connected to (an autovacuum worker, a
// pool closing) is waited for, a few seconds at most.
func createDatabase(t TB, clause string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, counter.Add(1))
	ident := pgx.Identifier{name}.Sanitize()
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		err := adminExec(context.Background(), "CREATE DATABASE "+ident+clause)
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectInUse && wait < 10*time.Second {
			time.Sleep(wait)
			continue
		}
		if err != nil {
			t.Fatalf("pgtest: create database: %v", err)
		}
		break
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = adminExec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
	})
	return pgserver.WithDatabase(adminURL, name)
}

// adminExec runs one statement on the maintenance database.
func adminExec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// Connect opens a pool to url that is closed when the test ends.
func Connect(t TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse url: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewServer starts a dedicated throwaway server for one test (one it may
// restart or break) with a migrated database, and returns the server and that
// database's URL. Both go when the test ends.
func NewServer(t TB) (*pgserver.Server, string) {
	t.Helper()
	setupMu.Lock()
	defer setupMu.Unlock()
	ctx := context.Background()
	srv, err := pgserver.Start(ctx, pgserver.Opts{})
	if err != nil {
		t.Fatalf("pgtest: start server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	pool, err := pgxpool.New(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer pool.Close()
	if _, err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return srv, srv.URL("postgres")
}

// Login creates a login role that is a member of group (riverbus_app or
// riverbus_worker), with a random name and password, and returns a pool
// connected as it to db's database: what an application or a worker process
// with only riverbus's grants can do. The pool is closed and the role
// dropped when the test ends.
func Login(t TB, db *pgxpool.Pool, group string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	var random [12]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatalf("pgtest: login: %v", err)
	}
	name := "rbt_" + strings.TrimPrefix(group, "riverbus_") + "_" + hex.EncodeToString(random[:4])
	password := hex.EncodeToString(random[4:]) // for servers that do not trust 127.0.0.1
	ident := pgx.Identifier{name}.Sanitize()
	// Utility statements take no parameters; the name and the hex password
	// are made here.
	if _, err := db.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' IN ROLE %s",
		ident, password, pgx.Identifier{group}.Sanitize())); err != nil {
		t.Fatalf("pgtest: login: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = adminExec(ctx, "DROP ROLE IF EXISTS "+ident)
	})
	cfg := db.Config().Copy()
	cfg.ConnConfig.User = name
	cfg.ConnConfig.Password = password
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: login: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the role is dropped
	return pool
}

// SetDatabaseDefaults sets, as a DBA would with ALTER DATABASE … SET, each
// setting of settings (name to value) for every session that connects to
// db's database from now on; sessions already open keep theirs.
func SetDatabaseDefaults(t TB, db *pgxpool.Pool, settings map[string]string) {
	t.Helper()
	ctx := context.Background()
	for name, value := range settings {
		// ALTER DATABASE takes no parameters: format quotes them.
		var stmt string
		if err := db.QueryRow(ctx, `SELECT format('ALTER DATABASE %I SET %I = %L', current_database(), $1::text, $2::text)`, name, value).Scan(&stmt); err != nil {
			t.Fatalf("pgtest: database defaults: %v", err)
		}
		if _, err := db.Exec(ctx, stmt); err != nil {
			t.Fatalf("pgtest: database defaults: %v", err)
		}
	}
}

// PgBouncer starts a real PgBouncer in pool mode mode in front of the test
// server, stopped when the test ends; its Through turns a URL NewDatabase
// returned into one through it. A missing pgbouncer binary fails the test
// (it is installed like PostgreSQL: `apt-get install -y pgbouncer`), so a
// machine without it cannot pass these tests by skipping them.
func PgBouncer(t TB, mode pgserver.PoolMode) *pgserver.PgBouncer {
	t.Helper()
	var b *pgserver.PgBouncer
	var err error
	switch {
	case server != nil:
		b, err = server.StartPgBouncer(context.Background(), pgserver.PgBouncerOpts{PoolMode: mode})
	case shared:
		b, err = pgserver.StartPgBouncerFor(context.Background(), adminURL, pgserver.PgBouncerOpts{PoolMode: mode})
	default:
		t.Fatalf("pgtest: PgBouncer needs a throwaway test server; unset %s", EnvURL)
	}
	if err != nil {
		t.Fatalf("pgtest: start pgbouncer: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

// Through returns url (from NewDatabase) through b, with the query
// parameters params added (such as "default_query_exec_mode=exec").
func Through(t TB, b *pgserver.PgBouncer, url string, params ...string) string {
	t.Helper()
	u, err := b.Through(url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	for _, p := range params {
		u += "&" + p
	}
	return u
}

// MigrateNewer plays a newer build's migrate on db: it applies, through
// migrations.Up, one migration numbered above this build's newest, which
// this build may not run against (a rolling upgrade). It returns that
// version.
func MigrateNewer(t TB, db *pgxpool.Pool) int {
	t.Helper()
	v := migrations.Newest() + 1
	_, err := migrations.UpWithOpts(context.Background(), db, &migrations.UpOpts{Newer: []migrations.Migration{
		{Version: v, Name: "newer_test", SQL: `CREATE TABLE riverbus_newer_test ()`},
	}})
	if err != nil {
		t.Fatalf("migrate to a newer schema: %v", err)
	}
	return v
}
