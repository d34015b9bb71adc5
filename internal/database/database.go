// Package database holds what every part of the engine shares about talking
// to PostgreSQL: the one small interface the engine's functions take, and
// the one way SQLSTATEs are recognised (pgerrcode's names, never literals).
package database

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the engine's functions need: *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// TxSettingsSQL is sent in the first round trip of every horizon round and
// fan-out batch (and by the late-event retirement).
//
// synchronous_commit off: the commit does not wait for its WAL to reach
// disk. What rounds and batches write is derived state, and every
// transaction that acts on it durably (a worker's fetch, a later round, a
// checkpoint) commits synchronously, which flushes the WAL up to and
// including theirs. A crash can only lose a round or a batch that nothing
// has acted on, and the next pass redoes it.
//
// jit off: on tables not yet analyzed (a fresh database with a backlog) the
// estimates are high enough for PostgreSQL to JIT-compile these millisecond
// queries, and compiling costs far more than running them.
const TxSettingsSQL = `SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true)`

// Code returns the SQLSTATE of err's PostgreSQL error, or "" when err is
// not one. Compare it with pgerrcode's constants.
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsCode reports whether err is a PostgreSQL error with SQLSTATE code.
func IsCode(err error, code string) bool { return err != nil && Code(err) == code }
