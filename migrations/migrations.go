// Package migrations holds riverbus's schema as embedded SQL and applies
// it, together with River's own migrations, with one call to Up.
//
// # Two kinds of file
//
// sql/NNN_name.up.sql are the numbered migrations: tables, columns,
// indexes, roles and grants on tables, applied once each, in order, and
// recorded in riverbus_migration. They are history: installs in the field
// have run them, so a shipped one is never edited. Their version is the
// schema version that builds compare (SchemaCheckVersion, Check).
//
// sql/current/*.sql hold the one current text of every function, trigger
// function and trigger riverbus ships, with their grants: what runs today.
// Up applies them, in file-name order, after the numbered migrations, on
// every run: CREATE OR REPLACE FUNCTION, which keeps each function's owner
// and grants and takes no table lock (replacing a function in use is safe;
// nothing here drops one), and CREATE OR REPLACE TRIGGER only for a trigger
// that is missing or differs from its text (sql/current/08_triggers.sql
// says why). They run in the transaction of the newest migration when Up
// applies it, so functions change at that migration's commit, and in a
// transaction of their own otherwise. A fresh install and an upgrade from
// any version end with the same objects
// (TestUpgradeFromEachVersionEndsAsAFreshInstall), and schema.sql is that
// schema, generated (go generate ./migrations) and kept in step by
// TestSchemaSQLIsCurrent.
//
// Files of their own rather than one: each holds the functions of one part
// (the event log, the horizon, lanes, dead letters, retention, the private
// schema) beside the comment that says why they are as they are, and the
// triggers, which need every function made first, come last. The numbered
// migrations keep the function bodies they shipped with: the fresh install
// replays them on the way (004 grants EXECUTE on every function existing
// when it runs, 018 and 019 rewrite retention_step from its text then), so
// slimming them would change what a fresh install passes through, for no
// gain once the current texts follow.
//
// To change a function or trigger: edit its current text, add a numbered
// migration (empty but for its comment and, when old code may run against
// the new text, a riverbus:oldest-code line) so that the schema version
// moves and builds can tell the texts apart, and regenerate schema.sql. Up
// applies current texts only when the schema ends at this build's newest
// migration: over a schema a newer build migrated, it would take that
// build's texts back.
//
// # Concurrency
//
// Up holds a table lock in the install's private schema (PrivateSchema),
// which only the owner may take, in a transaction on one dedicated
// connection for its whole run, so any number of processes may call it at
// once: the first migrates, the others wait and then find nothing left to
// do but put the current texts in again. (An advisory lock, which it
// replaced, could be taken by any login.) Each riverbus migration runs in
// its own transaction together with the row that records it in
// riverbus_migration, so a failed migration leaves no trace. Every lock
// wait is bounded and, when it runs out, names who held the lock.
package migrations

//go:generate go run ./internal/genschema schema.sql

import (
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/riverbus/riverbus/internal/database"
	"github.com/riverbus/riverbus/internal/pooler"
)

//go:embed sql/*.up.sql sql/current/*.sql
var files embed.FS

// currentText is one file of sql/current: the current text of some of
// riverbus's functions and triggers.
type currentText struct {
	Name string
	SQL  string
}

// current returns the files of sql/current in the order Up applies them
// (by name).
func current() ([]currentText, error) {
	entries, err := fs.Glob(files, "sql/current/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(entries)
	texts := make([]currentText, 0, len(entries))
	for _, path := range entries {
		sql, err := files.ReadFile(path)
		if err != nil {
			return nil, err
		}
		texts = append(texts, currentText{Name: strings.TrimPrefix(path, "sql/"), SQL: string(sql)})
	}
	return texts, nil
}

// Migration is one embedded riverbus migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// OldestCode is the oldest code version (the newest migration a build
	// embeds) that may still run against a schema with this migration, read
	// from a line "-- riverbus:oldest-code NNN" of its SQL. Zero means the
	// migration's own version: no older code may (processes of older code
	// stop delivering when it is applied).
	OldestCode int
}

// needs is the oldest code version that may run against m.
func (m Migration) needs() int { return cmp.Or(m.OldestCode, m.Version) }

// oldestCodeLine declares a migration compatible with older code.
var oldestCodeLine = regexp.MustCompile(`(?m)^--\s*riverbus:oldest-code\s+(\d+)\s*$`)

// UpResult says what Up applied.
type UpResult struct {
	// River lists the River migration versions applied by this call.
	River []int
	// Riverbus lists the riverbus migration versions applied by this call.
	Riverbus []int
}

// All returns the embedded riverbus migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.Glob(files, "sql/*.up.sql")
	if err != nil {
		return nil, err
	}
	var all []Migration
	for _, path := range entries {
		base := strings.TrimSuffix(strings.TrimPrefix(path, "sql/"), ".up.sql")
		num, name, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q is not named NNN_name.up.sql", path)
		}
		sql, err := files.ReadFile(path)
		if err != nil {
			return nil, err
		}
		m := Migration{Version: version, Name: name, SQL: string(sql)}
		if m.OldestCode, err = oldestCode(m); err != nil {
			return nil, fmt.Errorf("migration file %q: %w", path, err)
		}
		all = append(all, m)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Version < all[j].Version })
	for i := range all {
		if i > 0 && all[i].Version == all[i-1].Version {
			return nil, fmt.Errorf("two migrations have version %d", all[i].Version)
		}
	}
	return all, nil
}

// oldestCode reads m's "-- riverbus:oldest-code NNN" line (0 without one).
// Only code from SchemaCheckVersion on checks the schema while it runs, so
// a migration cannot declare older code compatible.
func oldestCode(m Migration) (int, error) {
	found := oldestCodeLine.FindAllStringSubmatch(m.SQL, -1)
	switch {
	case len(found) == 0:
		return 0, nil
	case len(found) > 1:
		return 0, errors.New("more than one riverbus:oldest-code line")
	}
	v, err := strconv.Atoi(found[0][1])
	if err != nil || v < SchemaCheckVersion || v >= m.Version {
		return 0, fmt.Errorf("riverbus:oldest-code %s must be at least %d (the first code that checks the schema) and below the migration's version %d",
			found[0][1], SchemaCheckVersion, m.Version)
	}
	return v, nil
}

// SchemaCheckVersion is the migration that brought the schema check
// (riverbus_schema_check): code from this version on stops delivering when
// the schema needs newer code, and migrate hands over to it (Up).
const SchemaCheckVersion = 22

// Newest returns the newest riverbus migration version this build embeds:
// the "code version" that a schema's needs are compared with.
func Newest() int { return newest() }

// newest is Newest, read once: every round and batch passes it.
var newest = sync.OnceValue(func() int {
	all, err := All()
	if err != nil || len(all) == 0 {
		// The embedded files are checked by this package's tests; a
		// build whose files do not parse knows no schema at all.
		return 0
	}
	return all[len(all)-1].Version
})

// UpOpts are the optional settings of UpWithOpts.
type UpOpts struct {
	// LockTimeout bounds the wait for another process's migration (Up's own
	// lock). Zero means LockTimeoutDefault.
	LockTimeout time.Duration
	// StatementLockTimeout bounds each migration statement's wait for a
	// table lock: a session that merely parsed a statement on a table in a
	// schema it may use (PREPARE p AS DELETE FROM river_job) holds a lock
	// that DDL waits for, whatever its grants. Zero means
	// StatementLockTimeoutDefault.
	StatementLockTimeout time.Duration
	// Logger, when set, is told at warn level, as soon as a wait for a lock
	// is seen, what the migration waits for and who holds it: a wait may
	// last LockTimeout, minutes, and the operator should not have to
	// guess. Nil means no log; the error of a wait that runs out names the
	// holders either way.
	Logger *slog.Logger

	// Newer are migrations applied after the embedded ones, as if this
	// build had them: a test plays a newer build's migrate with them (a
	// rolling upgrade). Each must be numbered above every embedded one.
	Newer []Migration
}

// LockTimeoutDefault and StatementLockTimeoutDefault are UpOpts' defaults.
const (
	LockTimeoutDefault          = 5 * time.Minute
	StatementLockTimeoutDefault = 30 * time.Second
)

// PrivateSchema returns the name of the schema that holds the locks of the
// riverbus install in schema install: riverbus_private_ and the install's
// schema, or a hash of that schema's name when the name would not fit in
// an identifier (63 bytes), so two installs in one database never share
// one. Only riverbus_worker and the owner have USAGE on it (migration 018).
func PrivateSchema(install string) string {
	if len(privateSchemaPrefix)+len(install) <= 63 {
		return privateSchemaPrefix + install
	}
	sum := sha256.Sum256([]byte(install))
	return privateSchemaPrefix + hex.EncodeToString(sum[:16])
}

const privateSchemaPrefix = "riverbus_private_"

// Up brings the database to the newest schema: River's migrations first, then
// riverbus's, which build on River's river_job table. It is safe to run
// concurrently and again: an up-to-date database is left unchanged.
func Up(ctx context.Context, pool *pgxpool.Pool) (*UpResult, error) {
	return UpWithOpts(ctx, pool, nil)
}

// UpWithOpts is Up with optional settings (nil: the defaults).
//
// It serializes with other processes' Up through a table lock in the
// install's private schema (PrivateSchema), which it creates first, so
// the role that migrates needs CREATE on the database the first time. That
// lock is taken in SHARE UPDATE EXCLUSIVE mode, which no lock a statement
// takes at parse time conflicts with, held by a transaction of its own on
// one connection while the migrations run on another. A wait that runs
// out, for that lock or for a table a migration alters, fails with a
// *database.LockWaitError naming who held the lock.
func UpWithOpts(ctx context.Context, pool *pgxpool.Pool, opts *UpOpts) (*UpResult, error) {
	if opts == nil {
		opts = &UpOpts{}
	}
	all, err := All()
	if err != nil {
		return nil, err
	}
	for _, m := range opts.Newer {
		if last := all[len(all)-1].Version; m.Version <= last {
			return nil, fmt.Errorf("migrate: UpOpts.Newer: migration %d is not above %d, the newest of this build", m.Version, last)
		}
		all = append(all, m)
	}
	return up(ctx, pool, opts, all)
}

// up is UpWithOpts with the riverbus migrations all.
func up(ctx context.Context, pool *pgxpool.Pool, opts *UpOpts, all []Migration) (*UpResult, error) {
	lockTimeout := cmp.Or(opts.LockTimeout, LockTimeoutDefault)
	stmtTimeout := cmp.Or(opts.StatementLockTimeout, StatementLockTimeoutDefault)
	// Through a transaction pooler the lock's transaction and the
	// migrations' connection would not be the sessions they are here for,
	// and what a failed run left would stay on a pooled server connection.
	if err := pooler.Check(ctx, pool.Config().ConnConfig, "riverbus migrate"); err != nil {
		return nil, err
	}
	// Migrations run on sessions of their own, with limits of their own
	// whatever a DBA set for the database or the role, or the caller for
	// the pool: a migration's DDL runs as long as its table needs (no
	// statement_timeout), the lock's transaction sits idle while the
	// migrations run (no idle_in_transaction_session_timeout, which would
	// end it and free the lock halfway), and every lock wait is bounded
	// (lock_timeout) and names the holder.
	session := database.SessionSettings{LockTimeout: stmtTimeout}
	lockPool, err := newPool(ctx, pool, session)
	if err != nil {
		return nil, err
	}
	defer lockPool.Close()
	conn, err := lockPool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Release()
	private, err := ensurePrivateSchema(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	lockTx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: begin: %w", err)
	}
	// Rolled back at the end: it wrote nothing, and ending it frees the lock.
	defer lockTx.Rollback(context.Background()) //nolint:errcheck
	err = database.WaitLockTxNotify(ctx, lockTx, "migrate: take the migration lock", lockTimeout, waiting(opts.Logger, "migrate: take the migration lock", lockTimeout), func() error {
		_, err := lockTx.Exec(ctx, fmt.Sprintf("LOCK TABLE %s IN SHARE UPDATE EXCLUSIVE MODE",
			pgx.Identifier{private, "riverbus_migrate_lock"}.Sanitize()))
		return err
	})
	if err != nil {
		return nil, database.WrapOp("migrate: take the migration lock", err)
	}

	// The migrations run on a connection of their own (the lock's
	// transaction stays open).
	work, err := newPool(ctx, pool, session)
	if err != nil {
		return nil, err
	}
	defer work.Close()
	workConn, err := work.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	// The one connection River's migrator will use, so the wait it may
	// fall into is watched on the right backend.
	workCfg, workPID := workConn.Conn().Config(), workConn.Conn().PgConn().PID()
	workConn.Release()

	res := &UpResult{}
	migrator, err := rivermigrate.New(riverpgxv5.New(work), &rivermigrate.Config{
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	var riverRes *rivermigrate.MigrateResult
	err = database.WaitLockNotify(ctx, func() *pgx.ConnConfig { return workCfg }, workPID, "migrate: river", stmtTimeout, waiting(opts.Logger, "migrate: river", stmtTimeout), func() error {
		var err error
		riverRes, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		return err
	})
	if err != nil {
		return nil, database.WrapOp("migrate: river", err)
	}
	for _, v := range riverRes.Versions {
		res.River = append(res.River, v.Version)
	}

	workConn, err = work.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer workConn.Release()
	if err := applyRiverbus(ctx, workConn.Conn(), all, private, stmtTimeout, opts.Logger, res); err != nil {
		return nil, err
	}
	return res, nil
}

// newPool returns a pool of one connection made as pool's are, whose
// session runs with settings (applied after pool's own AfterConnect).
func newPool(ctx context.Context, pool *pgxpool.Pool, settings database.SessionSettings) (*pgxpool.Pool, error) {
	cfg := pool.Config()
	cfg.MaxConns, cfg.MinConns = 1, 0
	cfg.AfterConnect = settings.AfterConnect(cfg.AfterConnect)
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	return p, nil
}

// applyRiverbus applies the riverbus migrations not yet recorded in
// riverbus_migration, each in a transaction of its own with its row, with
// the private schema's name in the setting riverbus.private_schema.
func applyRiverbus(ctx context.Context, conn *pgx.Conn, all []Migration, private string, stmtTimeout time.Duration, logger *slog.Logger, res *UpResult) error {
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS riverbus_migration (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: create riverbus_migration: %w", err)
	}
	rows, err := conn.Query(ctx, "SELECT version FROM riverbus_migration")
	if err != nil {
		return fmt.Errorf("migrate: read riverbus_migration: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return fmt.Errorf("migrate: read riverbus_migration: %w", err)
	}
	applied := map[int]bool{}
	schema := 0
	for _, v := range versions {
		applied[v] = true
		schema = max(schema, v)
	}
	// The current texts are this build's: they go in when the schema ends
	// at this build's newest migration, not when a test stops below it
	// (UpTo), nor over a schema a newer build migrated, whose texts they
	// would take back.
	last := all[len(all)-1].Version
	var texts []currentText
	if last >= newest() && schema <= last {
		if texts, err = current(); err != nil {
			return fmt.Errorf("migrate: read the current functions and triggers: %w", err)
		}
	}
	for _, m := range all {
		if applied[m.Version] {
			continue
		}
		op := fmt.Sprintf("migrate: apply %03d_%s", m.Version, m.Name)
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('riverbus.private_schema', $1, true)`, private); err != nil {
				return err
			}
			return database.WaitLockTxNotify(ctx, tx, op, stmtTimeout, waiting(logger, op, stmtTimeout), func() error {
				if err := handOver(ctx, tx, m, private); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, m.SQL)
				if err != nil {
					return err
				}
				if m.OldestCode != 0 {
					_, err = tx.Exec(ctx, "INSERT INTO riverbus_migration (version, name, oldest_code) VALUES ($1, $2, $3)", m.Version, m.Name, m.OldestCode)
				} else {
					_, err = tx.Exec(ctx, "INSERT INTO riverbus_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
				}
				if err != nil || m.Version != last {
					return err
				}
				// The newest migration's transaction: its functions and
				// triggers change with it, at its commit.
				return applyCurrent(ctx, tx, texts)
			})
		})
		if err != nil {
			return database.WrapOp(op, err)
		}
		res.Riverbus = append(res.Riverbus, m.Version)
	}
	if applied[last] && len(texts) > 0 {
		// Nothing to migrate: the current texts go in alone, and put back
		// what was changed by hand (a function replaced, a trigger
		// dropped) or by a build of this version with other texts.
		const op = "migrate: apply the current functions and triggers"
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('riverbus.private_schema', $1, true)`, private); err != nil {
				return err
			}
			return database.WaitLockTxNotify(ctx, tx, op, stmtTimeout, waiting(logger, op, stmtTimeout), func() error {
				return applyCurrent(ctx, tx, texts)
			})
		})
		if err != nil {
			return database.WrapOp(op, err)
		}
	}
	return nil
}

// applyCurrent runs the current texts in tx, in order.
func applyCurrent(ctx context.Context, tx pgx.Tx, texts []currentText) error {
	for _, t := range texts {
		if _, err := tx.Exec(ctx, t.SQL); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	return nil
}

// waiting returns what tells logger (nil: nothing) that op waits for a
// lock, and for whom, giving up after bound.
func waiting(logger *slog.Logger, op string, bound time.Duration) database.LockWaitFunc {
	if logger == nil {
		return nil
	}
	return func(lock string, holders []database.LockHolder) {
		names := make([]string, len(holders))
		for i, h := range holders {
			names[i] = h.String()
		}
		logger.Warn(op+": waiting for a lock", "lock", cmp.Or(lock, "a lock"), "held_by", strings.Join(names, ", "), "gives_up_after", bound)
	}
}

// handOver makes migration m, about to run in tx, wait for the processes
// whose code it leaves behind. When m needs newer code than the schema
// did, it takes riverbus_schema_lock in ACCESS EXCLUSIVE mode, which every
// delivering transaction takes in ACCESS SHARE mode in its first statement
// (riverbus_schema_check, migration 022): the migration waits for every
// transaction that passed the check under the old needs, and each check
// that follows waits for its commit and then finds m's row, so old code
// stops delivering at the commit, and no transaction of it is still in
// flight then. A migration old code may still run against needs no wait.
func handOver(ctx context.Context, tx pgx.Tx, m Migration, private string) error {
	if m.Version <= SchemaCheckVersion {
		return nil // code before the check stops only by being stopped
	}
	var schema, needs int
	if err := tx.QueryRow(ctx, sqlSchemaVersions).Scan(&schema, &needs); err != nil {
		return fmt.Errorf("read the schema's needs: %w", err)
	}
	if m.needs() <= needs {
		return nil
	}
	_, err := tx.Exec(ctx, fmt.Sprintf("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE",
		pgx.Identifier{private, "riverbus_schema_lock"}.Sanitize()))
	return err
}

// sqlSchemaVersions: the schema's version and its needs, the oldest code
// version that may run against it (migration 022's
// riverbus_migration.oldest_code), as riverbus_schema_check reads them.
const sqlSchemaVersions = `SELECT coalesce(max(version), 0), coalesce(max(coalesce(oldest_code, version)), 0) FROM riverbus_migration`

// ensurePrivateSchema creates the install's private schema and the table
// whose lock Up holds, unless they exist, and returns the schema's name.
// Several processes may run it at once on an empty database: CREATE ... IF
// NOT EXISTS checks and then inserts into the catalog, so the loser of
// that race fails on a unique index and tries again, finding them there.
func ensurePrivateSchema(ctx context.Context, conn *pgx.Conn) (string, error) {
	var install *string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&install); err != nil {
		return "", fmt.Errorf("migrate: read the current schema: %w", err)
	}
	if install == nil {
		return "", errors.New("migrate: no schema to install into: no schema of search_path exists")
	}
	if strings.HasPrefix(*install, privateSchemaPrefix) {
		return "", fmt.Errorf("migrate: schema %q is named like the private schema of a riverbus install (%s...); install riverbus in another schema", *install, privateSchemaPrefix)
	}
	private := PrivateSchema(*install)
	for attempt := 1; ; attempt++ {
		var exists bool
		if err := conn.QueryRow(ctx, sqlPrivateLockExists, private).Scan(&exists); err != nil {
			return "", fmt.Errorf("migrate: look for the private schema %s: %w", private, err)
		}
		if exists {
			return private, nil
		}
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s", pgx.Identifier{private}.Sanitize()))
		if err == nil {
			_, err = conn.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s ()", pgx.Identifier{private, "riverbus_migrate_lock"}.Sanitize()))
		}
		switch {
		case err == nil:
		case attempt < 5 && (database.IsCode(err, pgerrcode.UniqueViolation) || database.IsCode(err, pgerrcode.DuplicateSchema) ||
			database.IsCode(err, pgerrcode.DuplicateTable) || database.IsCode(err, pgerrcode.DuplicateObject)):
			// DuplicateObject: the table's row type lost the race in pg_type.
		case database.IsCode(err, pgerrcode.InsufficientPrivilege):
			return "", fmt.Errorf("migrate: create the private schema %s (the role that migrates needs CREATE on the database, or a superuser runs CREATE SCHEMA %s AUTHORIZATION <that role>): %w",
				private, pgx.Identifier{private}.Sanitize(), err)
		default:
			return "", fmt.Errorf("migrate: create the private schema %s: %w", private, err)
		}
	}
}

// sqlPrivateLockExists: whether the private schema $1 and its migration
// lock table exist (a catalog lookup, which needs no USAGE on it).
const sqlPrivateLockExists = `SELECT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = 'riverbus_migrate_lock')`

// Version returns the newest riverbus migration version applied to the
// database, or 0 when none is.
func Version(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var v int
	err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM riverbus_migration`).Scan(&v)
	if err != nil {
		if database.IsCode(err, pgerrcode.UndefinedTable) {
			return 0, nil // never migrated
		}
		return 0, err
	}
	return v, nil
}
