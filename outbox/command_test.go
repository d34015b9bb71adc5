package outbox_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

func TestRecordCommandTx(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	require.NoError(t, outbox.RecordCommandTx(ctx, tx, outbox.Command{Type: "Subscribe", Data: json.RawMessage(`{"student":"s1"}`)}))
	_, err = outbox.AppendTx(ctx, tx, event("StudentSubscribed", "student=s1"), event("SeatTaken"))
	require.NoError(t, err)
	var xid uint64
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_current_xact_id()").Scan(&xid))
	require.NoError(t, tx.Commit(ctx))

	// The command and its events share the transaction id.
	var (
		commandXID uint64
		typ        string
		data       string
		metadata   string
		events     int
	)
	require.NoError(t, bundle.db.QueryRow(ctx, `
SELECT c.transaction_id, c.type, c.data::text, c.metadata::text, count(e.*)
FROM riverbus_command c JOIN riverbus_event e USING (transaction_id)
GROUP BY 1, 2, 3, 4`).Scan(&commandXID, &typ, &data, &metadata, &events))
	require.Equal(t, xid, commandXID)
	require.Equal(t, "Subscribe", typ)
	require.Equal(t, `{"student": "s1"}`, data)
	require.Equal(t, `{}`, metadata)
	require.Equal(t, 2, events)

	// One command per transaction.
	tx, err = bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	require.NoError(t, outbox.RecordCommandTx(ctx, tx, outbox.Command{Type: "A", Data: json.RawMessage(`1`), Metadata: json.RawMessage(`{"by":"x"}`)}))
	err = outbox.RecordCommandTx(ctx, tx, outbox.Command{Type: "B", Data: json.RawMessage(`2`)})
	require.ErrorContains(t, err, "record command: the transaction already recorded one")
}

func TestRecordCommandTxRejectsInvalidCommands(t *testing.T) {
	t.Parallel()
	ctx, bundle := setup(t)

	tests := []struct {
		name  string
		cmd   outbox.Command
		field string
		error string
	}{
		{"EmptyType", outbox.Command{Data: json.RawMessage(`{}`)}, "Command.Type", "outbox: Command.Type must not be empty"},
		{"NoData", outbox.Command{Type: "C"}, "Command.Data", "outbox: Command.Data must not be empty"},
		{"DataNotJSON", outbox.Command{Type: "C", Data: json.RawMessage(`nope`)}, "Command.Data", "outbox: Command.Data must be valid JSON"},
		{"MetadataArray", outbox.Command{Type: "C", Data: json.RawMessage(`{}`), Metadata: json.RawMessage(`[1]`)}, "Command.Metadata", "outbox: Command.Metadata must be a JSON object, got array"},
	}
	tx, err := bundle.db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := outbox.RecordCommandTx(ctx, tx, tt.cmd)
			requireInvalid(t, err, -1, tt.field)
			require.EqualError(t, err, tt.error)
		})
	}
	require.NoError(t, tx.Commit(ctx))
	var n int
	require.NoError(t, bundle.db.QueryRow(ctx, "SELECT count(*) FROM riverbus_command").Scan(&n))
	require.Equal(t, 0, n)
}
