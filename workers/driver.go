package workers

import (
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

// NewDriver returns a Driver over db. Nil logger: slog.Default(). A nil db
// gives a driver that can only run statements in the caller's transactions
// (riverpgxv5.New(nil)).
func NewDriver(db *pgxpool.Pool, logger *slog.Logger) *Driver {
	if logger == nil {
		logger = slog.Default()
	}
	return &Driver{Driver: riverpgxv5.New(db), logger: logger}
}

// GetListener returns River's listener wrapped in the check of the control
// channel. River calls it once per client, for the client's notifier.
func (d *Driver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return newControlListener(d.Driver.GetListener(params), d.Driver.GetExecutor(), params.Schema, d.logger)
}

var _ riverdriver.Driver[pgx.Tx] = (*Driver)(nil)
