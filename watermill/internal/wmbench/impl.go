package wmbench

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/fanout"
	rbw "github.com/riverbus/riverbus/watermill"
	"github.com/riverbus/riverbus/workers"
)

// impl is one side of the comparison.
type impl string

const (
	implRiverbus     impl = "riverbus"
	implWatermillSQL impl = "watermill-sql"
)

func parseImpl(s string) (impl, error) {
	switch impl(s) {
	case implRiverbus, implWatermillSQL:
		return impl(s), nil
	}
	return "", fmt.Errorf("--impl must be %q or %q, got %q", implRiverbus, implWatermillSQL, s)
}

// topic is the one topic every scenario publishes to.
const topic = "bench"

// publishedAtKey is the metadata entry that carries a message's publish
// time (Unix nanoseconds, taken just before its Publish call) to the
// handler.
const publishedAtKey = "bench_published_at"

// watermillSQLPollInterval is watermill-sql's PollInterval here: how long
// its subscriber waits after a query that found no message. Its default is
// 1s; riverbus's worker polls each queue every 100ms
// (workers.FetchPollIntervalDefault), so watermill-sql gets the same.
// riverbus is also woken by notifications (an append wakes the fan-out, a
// job insert wakes River), watermill-sql has none: polling is how it learns
// of a message.
const watermillSQLPollInterval = workers.FetchPollIntervalDefault

// settingsNote says how each side is configured, for the report.
func settingsNote() string {
	return fmt.Sprintf("riverbus: the adapter's defaults (riverbus/watermill PublisherConfig{}, SubscriberConfig with a consumer group: MaxInFlight %d, River FetchPollInterval %s and insert notifications, the fan-out's default fanout.Config: PollInterval %s and append notifications); "+
		"watermill-sql: DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter (batches of 100 rows a query, JSON payload column), InitializeSchema true, a consumer group, PollInterval %s (its default 1s; no notifications), other settings default; "+
		"both over pgx v5 pgxpool pools (watermill-sql through sql.BeginnerFromPgx); payloads: JSON documents of about 100 bytes, one metadata entry",
		workers.MaxWorkersDefault, workers.FetchPollIntervalDefault, fanout.PollIntervalDefault, watermillSQLPollInterval)
}

// newPublisher returns side's publisher over db, one transaction per
// Publish call on both sides.
func newPublisher(side impl, db *pgxpool.Pool) (message.Publisher, error) {
	if side == implRiverbus {
		return rbw.NewPublisher(db, rbw.PublisherConfig{}, nil)
	}
	// watermill-sql takes pgx natively (BeginnerFromPgx, new in v4) or
	// through database/sql (BeginnerFromStdSQL over pgx's stdlib driver);
	// the native adapter is the one for a pgx application, and with it both
	// sides run over the same driver and the same pgxpool pool, so the
	// figures compare the designs rather than two drivers.
	return wmsql.NewPublisher(wmsql.BeginnerFromPgx(db), wmsql.PublisherConfig{SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}}, nil)
}

// subscriberOpts are the settings a scenario gives a subscriber beyond
// the defaults.
type subscriberOpts struct {
	group string
	// runFanout: the riverbus subscriber runs the fan-out
	// (SubscriberConfig.RunFanout). Ignored for watermill-sql.
	runFanout bool
	logger    *slog.Logger
}

// newSubscriber returns side's subscriber over db.
func newSubscriber(side impl, db *pgxpool.Pool, o subscriberOpts) (message.Subscriber, error) {
	if side == implRiverbus {
		return rbw.NewSubscriber(db, rbw.SubscriberConfig{
			ConsumerGroup: o.group,
			RunFanout:     o.runFanout,
			Logger:        o.logger,
			Work:          workers.Config{Logger: o.logger},
		}, nil)
	}
	return wmsql.NewSubscriber(wmsql.BeginnerFromPgx(db), wmsql.SubscriberConfig{
		ConsumerGroup:    o.group,
		PollInterval:     watermillSQLPollInterval,
		SchemaAdapter:    wmsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
	}, slogAdapter(o.logger))
}

// initialize prepares db for messages of topic kept for each group, before
// anything is published: riverbus creates each group's pool, watermill-sql
// creates its tables (a new consumer group reads a topic from its first
// message on both sides).
func initialize(side impl, db *pgxpool.Pool, logger *slog.Logger, groups ...string) error {
	for _, g := range groups {
		sub, err := newSubscriber(side, db, subscriberOpts{group: g, logger: logger})
		if err != nil {
			return err
		}
		err = sub.(message.SubscribeInitializer).SubscribeInitialize(topic)
		_ = sub.Close()
		if err != nil {
			return fmt.Errorf("initialize topic %q for group %q: %w", topic, g, err)
		}
	}
	return nil
}

// newMessage is message i: a JSON payload (watermill-sql's default payload
// column is JSON) of about 100 bytes, and its index and publish time in the
// metadata.
func newMessage(i int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, padding))
	msg.Metadata.Set(indexKey, strconv.Itoa(i))
	msg.Metadata.Set(publishedAtKey, strconv.FormatInt(time.Now().UnixNano(), 10))
	return msg
}

// indexKey is the metadata entry that carries a message's index in its
// run.
const indexKey = "bench_n"

const padding = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"

// publishedAt returns the publish time a message carries.
func publishedAt(msg *message.Message) (time.Time, error) {
	ns, err := strconv.ParseInt(msg.Metadata.Get(publishedAtKey), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("message %s: metadata %s: %w", msg.UUID, publishedAtKey, err)
	}
	return time.Unix(0, ns), nil
}

// publishAll publishes n messages from conc goroutines, perCall messages
// in each Publish call, and returns how long it took.
func publishAll(ctx context.Context, pub message.Publisher, n, conc, perCall int) (time.Duration, error) {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				hi := int(next.Add(int64(perCall)))
				lo := hi - perCall
				if lo >= n {
					return
				}
				msgs := make([]*message.Message, 0, perCall)
				for i := lo; i < min(hi, n); i++ {
					msgs = append(msgs, newMessage(i))
				}
				if err := pub.Publish(topic, msgs...); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return elapsed, firstErr
}

// startFanout starts riverbus's fan-out (a riverbus.Client, as an
// application or `riverbus run` runs it) over db.
func startFanout(ctx context.Context, db *pgxpool.Pool, logger *slog.Logger) (*riverbus.Client, error) {
	c, err := riverbus.NewClient(db, &riverbus.Config{Logger: logger, ProcessName: "riverbus-watermill-bench fan-out"})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the fan-out: %w", err)
	}
	return c, nil
}

// waitFannedOut waits until every pool's cursor has passed the last event
// appended: each event of the backlog is a job.
func waitFannedOut(ctx context.Context, db *pgxpool.Pool, c *riverbus.Client) error {
	var last int64
	if err := db.QueryRow(ctx, `SELECT coalesce(max(global_sequence), 0) FROM riverbus_event`).Scan(&last); err != nil {
		return fmt.Errorf("last event: %w", err)
	}
	for {
		pools, err := c.PoolList(ctx)
		if err != nil {
			return fmt.Errorf("pools: %w", err)
		}
		done := true
		for _, p := range pools {
			done = done && p.Cursor >= last
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the fan-out: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// slogAdapter gives watermill-sql's logs to logger (info and above; its
// debug and trace lines are per message).
func slogAdapter(logger *slog.Logger) watermill.LoggerAdapter {
	if logger == nil {
		return watermill.NopLogger{}
	}
	return watermill.NewSlogLogger(logger)
}
