package outbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
)

// The package works in every pgx query execution mode, including the simple
// protocol that PgBouncer in transaction mode needs.
func TestQueryExecModes(t *testing.T) {
	t.Parallel()
	modes := map[string]pgx.QueryExecMode{
		"CacheStatement": pgx.QueryExecModeCacheStatement,
		"CacheDescribe":  pgx.QueryExecModeCacheDescribe,
		"DescribeExec":   pgx.QueryExecModeDescribeExec,
		"Exec":           pgx.QueryExecModeExec,
		"SimpleProtocol": pgx.QueryExecModeSimpleProtocol,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = mode
			db, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(db.Close)

			e := event("A", "k=it's", `q="x"`)
			e.Data = json.RawMessage(`{"s": "it's \"quoted\" \\ and ünïcode"}`)
			e.Key = "o'brien"
			appended, err := outbox.Append(ctx, db, e, event("B"))
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2}, []int64{appended[0].GlobalSequence, appended[1].GlobalSequence})

			cond := outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Tags: []string{"k=it's"}}, {Types: []string{"B"}}}, After: 1}
			_, err = outbox.AppendIf(ctx, db, cond, event("C"))
			require.ErrorIs(t, err, outbox.ErrConflict)
			cond.After = 2
			appended, err = outbox.AppendIf(ctx, db, cond, event("C"))
			require.NoError(t, err)
			require.Equal(t, int64(3), appended[0].GlobalSequence)

			for _, params := range []outbox.ReadParams{
				{Query: outbox.Query{{Tags: []string{`q="x"`}}}, Limit: 5},
				{Key: "o'brien", Query: outbox.Query{{Types: []string{"A"}}}},
				{Limit: 1},
			} {
				events, err := outbox.Read(ctx, db, params)
				require.NoError(t, err)
				require.Equal(t, []int64{1}, sequences(events))
				require.Equal(t, []string{"k=it's", `q="x"`}, events[0].Tags)
				require.JSONEq(t, string(e.Data), string(events[0].Data))
				require.Equal(t, appended[0].EventID.Version(), events[0].EventID.Version())
			}
			events, err := outbox.Read(ctx, db, outbox.ReadParams{Query: outbox.Query{{Types: []string{"C"}}}})
			require.NoError(t, err)
			require.Equal(t, []int64{3}, sequences(events))

			require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				return outbox.RecordCommandTx(ctx, tx, outbox.Command{Type: "Cmd", Data: json.RawMessage(`{"a":"b'c"}`)})
			}))
		})
	}
}
