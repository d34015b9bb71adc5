package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SkipNotifyTx switches off, for the rest of tx, the wake-up NOTIFY that
// appending an event sends to the fan-out. It is for writers that use
// two-phase commit: PostgreSQL refuses to PREPARE a transaction that has
// sent a NOTIFY. Call it before the first append of tx. The events are
// fanned out all the same, once the transaction commits (COMMIT PREPARED),
// by the fan-out's next poll (RIVERBUS_POLL_INTERVAL, 1 s by default)
// instead of at once.
//
// It sets riverbus.notify to off with SET LOCAL semantics; a session or a
// whole connection pool can do the same with the connection parameter
// options='-c riverbus.notify=off'. See migrations/sql/010_notify_setting.up.sql.
func SkipNotifyTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, skipNotifyQuery); err != nil {
		return fmt.Errorf("skip notify: %w", err)
	}
	return nil
}
