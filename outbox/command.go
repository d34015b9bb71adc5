package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Command is the command that caused a transaction's events, recorded for
// audit in riverbus_command under the transaction's id, which its events
// carry as their transaction_id.
type Command struct {
	// Type names the command; 1 to 255 characters.
	Type string
	// Data is the command's payload; valid JSON.
	Data json.RawMessage
	// Metadata is a JSON object; empty means {}.
	Metadata json.RawMessage
}

// RecordCommandTx records cmd as the command of tx; the events tx appends,
// before or after, carry the same transaction id. A transaction records at
// most one command: a second one returns an error and aborts tx.
//
// The command is validated like an event: on a *ValidationError
// (ErrInvalidEvent) no SQL has run.
func RecordCommandTx(ctx context.Context, tx pgx.Tx, cmd Command) error {
	if err := validateCommand(cmd); err != nil {
		return err
	}
	metadata := cmd.Metadata
	if len(metadata) == 0 {
		metadata = emptyObject
	}
	if _, err := tx.Exec(ctx, recordCommandQuery, cmd.Type, string(cmd.Data), string(metadata)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == "riverbus_command_pkey" {
			return fmt.Errorf("record command: the transaction already recorded one: %w", err)
		}
		return fmt.Errorf("record command: %w", translateError(err))
	}
	return nil
}
