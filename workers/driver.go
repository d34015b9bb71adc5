package workers

import (
	"cmp"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Driver is River's pgx v5 driver whose listener checks River's control
// messages against the database before River acts on them (docs/design.md §9).
// Every River client riverbus makes uses it.
//
// River acts on what arrives on its control channel: a cancel message ends
// a running job cancelled, a pause message stops a queue. Any login may
// NOTIFY any channel, grants or not, so those messages are hints to look at
// the database: the listener passes on a cancel only for a running job whose
// row carries River's own cancel request (JobCancel writes it in the
// statement that sends the message), and, for a pause, resume or metadata
// message, the state river_queue holds. A message the database does not
// confirm is dropped.
type Driver struct {
	*riverpgxv5.Driver

	logger *slog.Logger
}

// NewDriver returns a Driver over db: the River driver riverbus's own River
// clients use, for an application that builds a River client of its own
// over pool jobs (or over any queue it shares a database with riverbus):
//
//	rc, err := river.NewClient(workers.NewDriver(dbPool, logger), cfg)
//
// With riverpgxv5.New instead, any login of the database could end the
// client's running jobs cancelled and pause its queues (docs/security.md).
// Every few seconds the listener also passes on river_queue's state and the
// cancel requests of running jobs, so a message lost on the way takes
// effect all the same. Build db with riverbus.ConfigurePool, so that a
// DBA's limits on the database's sessions cannot cut River's fetches and
// completions short.
//
// Nil logger: slog.Default(). It logs, at most every few seconds, how many
// messages it dropped. A nil db gives a driver for the caller's
// transactions only, as riverpgxv5.New(nil) does.
func NewDriver(db *pgxpool.Pool, logger *slog.Logger) *Driver {
	if logger == nil {
		logger = slog.Default()
	}
	return &Driver{Driver: riverpgxv5.New(db), logger: logger}
}

// GetListener returns River's listener wrapped in the check of the control
// channel. River calls it once per client, for the client's notifier.
func (d *Driver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return newControlListener(d.Driver.GetListener(params), d.Driver.GetExecutor(), params.Schema, d.log())
}

var _ riverdriver.Driver[pgx.Tx] = (*Driver)(nil)

// GetExecutor returns River's executor with a fetch that commits only once
// its rows are in hand (fetchExecutor).
func (d *Driver) GetExecutor() riverdriver.Executor {
	return &fetchExecutor{Executor: d.Driver.GetExecutor(), logger: d.log()}
}

// log is the driver's logger: a Driver built as a struct literal, not by
// NewDriver, logs to slog.Default() too.
func (d *Driver) log() *slog.Logger { return cmp.Or(d.logger, slog.Default()) }
