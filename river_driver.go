package riverbus

import (
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"

	"github.com/riverbus/riverbus/workers"
)

// NewRiverDriver returns the River driver riverbus's own River clients use,
// for an application that builds a River client of its own over pool jobs
// (or over any queue it shares a database with riverbus):
//
//	rc, err := river.NewClient(riverbus.NewRiverDriver(dbPool, logger), cfg)
//
// It is River's pgx v5 driver (riverpgxv5) whose listener passes on a
// message of River's control channel only when the database confirms it: a
// cancel only for a running job River's JobCancel (or River UI's Cancel)
// marked, a pause, resume or metadata change only as river_queue holds it.
// Every few seconds it also passes on river_queue's state and the cancel
// requests of running jobs, so a message lost on the way takes effect all
// the same. Any login of the database may NOTIFY River's channel, grants or
// not: with riverpgxv5.New, any of them can end a client's running jobs
// cancelled and pause its queues (docs/security.md).
//
// Build db with ConfigurePool, so that a DBA's limits on the database's
// sessions cannot cut River's fetches and completions short.
//
// Nil logger: slog.Default(). It logs, at most every few seconds, how many
// messages it dropped. A nil db gives a driver for the caller's
// transactions only, as riverpgxv5.New(nil) does.
func NewRiverDriver(db *pgxpool.Pool, logger *slog.Logger) riverdriver.Driver[pgx.Tx] {
	return workers.NewDriver(db, logger)
}
