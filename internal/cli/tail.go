package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/spf13/cobra"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
)

// Tail follows the horizon, not the newest sequence: it shows events in
// the order the fan-out delivers them, holes held until they are settled.
const sqlTailEvents = `SELECT global_sequence, event_id, type, key, tags, data, metadata, occurred_at, version
FROM riverbus_event
WHERE global_sequence > $1 AND global_sequence <= (SELECT horizon FROM riverbus_horizon)
ORDER BY global_sequence LIMIT 1000`

func (a *app) tailCommand() *cobra.Command {
	var (
		pool   string
		from   int64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print events as they are committed and settled, in sequence order",
		Long: `Prints events as the horizon passes them: every event once, in global-sequence
order, an out-of-order commit held until the hole below it is settled — the
order in which the fan-out delivers them. The horizon is advanced by a running
fan-out (riverbus run or riverbus fanout). With --pool, only the events that
pool's filter lets through.`,
		Example: `  riverbus tail
  riverbus tail --pool billing --json
  riverbus tail --from 0        # the whole log, then follow`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			u, err := a.requireURL()
			if err != nil {
				return err
			}
			db, err := a.connectRetrying(ctx, u, "riverbus tail")
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			defer db.Close()
			if err := requireSchema(ctx, db, u); err != nil {
				return err
			}
			client, err := a.newClient(db, nil, true)
			if err != nil {
				return err
			}
			var filter *bustype.Pool
			if pool != "" {
				if filter, err = client.PoolGet(ctx, pool); err != nil {
					return err
				}
			}
			after := from
			if !cmd.Flags().Changed("from") {
				if after, err = client.Horizon(ctx); err != nil {
					return err
				}
			}
			return a.tail(ctx, db, after, filter, asJSON)
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "only events this pool's filter lets through")
	cmd.Flags().Int64Var(&from, "from", 0, "start after this sequence (default: the current horizon)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON envelope per line")
	return cmd
}

func (a *app) tail(ctx context.Context, db *pgxpool.Pool, after int64, filter *bustype.Pool, asJSON bool) error {
	wake := make(chan struct{}, 1)
	listener := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, db.Config().ConnConfig.Copy())
		},
		ReconnectDelay: time.Second,
	}
	listener.Handle("riverbus_horizon", pgxlisten.HandlerFunc(func(context.Context, *pgconn.Notification, *pgx.Conn) error {
		select {
		case wake <- struct{}{}:
		default:
		}
		return nil
	}))
	go func() { _ = listener.Listen(ctx) }()

	enc := json.NewEncoder(a.stdout)
	for {
		rows, err := db.Query(ctx, sqlTailEvents, after)
		var events []outbox.Event
		if err == nil {
			events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[outbox.Event])
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.logger.Warn("tail: reading events failed; retrying", "error", err)
		}
		for _, e := range events {
			after = e.GlobalSequence
			if filter != nil && !filter.Matches(e.Type, e.Tags) {
				continue
			}
			if asJSON {
				if err := enc.Encode(e); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(a.stdout, "%d  %s  %s  version=%d  key=%s  tags=%s  %s\n", e.GlobalSequence, e.OccurredAt.Format(time.RFC3339Nano),
				safe(e.Type), e.Version, safe(e.Key), safeList(e.Tags), safe(string(e.Data)))
		}
		if len(events) == 1000 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(time.Second):
		}
	}
}
