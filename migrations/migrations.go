// Package migrations holds riverbus's schema as embedded, numbered SQL files
// and applies them, together with River's own migrations, with one call to Up.
//
// # Concurrency
//
// Up holds a PostgreSQL advisory lock on one dedicated connection for its
// whole run, so any number of processes may call it at once: the first
// migrates, the others wait and then find nothing left to do. Each riverbus
// migration runs in its own transaction together with the row that records
// it in riverbus_migration, so a failed migration leaves no trace.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/riverbus/riverbus/internal/database"
)

//go:embed sql/*.up.sql
var files embed.FS

// lockKey is the advisory lock riverbus migrations hold ("rbus", "migr").
const lockKeyClass, lockKeyObject int32 = 0x72627573, 0x6d696772

// Migration is one embedded riverbus migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

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
		all = append(all, Migration{Version: version, Name: name, SQL: string(sql)})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Version < all[j].Version })
	for i := range all {
		if i > 0 && all[i].Version == all[i-1].Version {
			return nil, fmt.Errorf("two migrations have version %d", all[i].Version)
		}
	}
	return all, nil
}

// Up brings the database to the newest schema: River's migrations first, then
// riverbus's, which build on River's river_job table. It is safe to run
// concurrently and again: an up-to-date database is left unchanged.
func Up(ctx context.Context, pool *pgxpool.Pool) (*UpResult, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	locked := false
	defer func() {
		if locked {
			// A connection whose unlock failed must not go back to the pool
			// still holding the lock.
			if _, err := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1, $2)", lockKeyClass, lockKeyObject); err != nil {
				_ = conn.Conn().Close(context.Background())
			}
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", lockKeyClass, lockKeyObject); err != nil {
		return nil, fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	locked = true

	res := &UpResult{}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	riverRes, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range riverRes.Versions {
		res.River = append(res.River, v.Version)
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS riverbus_migration (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate: create riverbus_migration: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM riverbus_migration")
	if err != nil {
		return nil, fmt.Errorf("migrate: read riverbus_migration: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("migrate: read riverbus_migration: %w", err)
	}
	for _, v := range versions {
		applied[v] = true
	}
	for _, m := range all {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO riverbus_migration (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("migrate: apply %03d_%s: %w", m.Version, m.Name, err)
		}
		res.Riverbus = append(res.Riverbus, m.Version)
	}
	return res, nil
}

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
