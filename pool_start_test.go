package riverbus_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
)

// A start point is refused beyond the end of the log: the last sequence
// handed out, or the horizon when a setval backwards left the sequence
// below it. The statement that creates or moves the pool checks it, and the
// error says where the log ends.
func TestPoolStartBeyondTheLog(t *testing.T) {
	t.Parallel()
	ctx, b, client := operatorSetup(t)
	for range 3 {
		_, err := outbox.Append(ctx, b.db, outbox.Event{Type: "invoice.paid", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}

	_, _, err := client.PoolCreate(ctx, bustype.PoolParams{Name: "future", From: bustype.FromSequence(4)})
	var beyond *bustype.StartBeyondLogError
	require.ErrorAs(t, err, &beyond)
	require.Equal(t, bustype.StartBeyondLogError{What: "start sequence", Position: 4, LastSequence: 3}, *beyond)
	require.ErrorIs(t, err, bustype.ErrInvalidPool)
	_, err = client.PoolGet(ctx, "future")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)

	_, err = client.PoolReset(ctx, "billing", 999999)
	require.ErrorAs(t, err, &beyond)
	require.EqualError(t, err, `reset pool "billing": invalid pool: reset position 999999 is beyond the end of the log `+
		`(last sequence handed out 3): the next 999996 events appended would never reach the pool; give 3 or less`)
	p, err := client.PoolGet(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0}, []int64{p.Cursor, p.Checkpoint})

	// The horizon above the sequence (a setval backwards): the horizon is
	// where the log ends.
	_, err = b.db.Exec(ctx, `UPDATE riverbus_horizon SET horizon = 10`)
	require.NoError(t, err)
	_, err = client.PoolReset(ctx, "billing", 11)
	require.ErrorContains(t, err, "reset position 11 is beyond the end of the log (horizon 10, above the last sequence handed out 3)")
	p, err = client.PoolReset(ctx, "billing", 10)
	require.NoError(t, err)
	require.Equal(t, int64(10), p.Cursor)

	// A pool above the end all the same (SQL) is flagged by Status.
	_, err = b.db.Exec(ctx, `UPDATE riverbus_pool_checkpoint SET checkpoint_seq = 25 WHERE pool = 'billing'`)
	require.NoError(t, err)
	st, err := client.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(15), st.Pool("billing").AheadOfLog)

	absent, err := client.EventTypesAbsent(ctx, []string{"invoice.payed", "invoice.paid", "invoice.sent"})
	require.NoError(t, err)
	require.Equal(t, []string{"invoice.payed", "invoice.sent"}, absent)
}
