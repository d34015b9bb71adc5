package watermill_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/riverbustest"
	rbw "github.com/riverbus/riverbus/watermill"
	"github.com/riverbus/riverbus/workers"
)

// stressCopies is how many copies of the suite TestPubSubStress runs when
// STRESS_TEST_COUNT is not set.
const stressCopies = 2

// quietLogger keeps riverbus's and River's info lines (a start and a
// stop per subscription, hundreds in the suite) out of the test output.
var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// suitePool is the pool template of the suite's subscribers: retries
// without the default back-off, as the suite nacks one message after
// another and waits 15 s for them to come back, and attempts enough for
// its hundreds of nacks.
func suitePool(ordering bustype.Ordering) bustype.PoolParams {
	return bustype.PoolParams{
		Ordering:    ordering,
		MaxAttempts: 1000,
		Retry:       bustype.RetrySchedule{Base: 10 * time.Millisecond, Factor: 1, MaxDelay: 10 * time.Millisecond, Jitter: -1},
	}
}

// connect returns a pool on url with room for the suite's subscriptions,
// each of which holds a River listener connection.
func connect(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	riverbus.ConfigurePool(cfg)
	cfg.MaxConns = 150
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// constructors returns the suite's constructors over db, with a fan-out of
// their own running (as `riverbus run` would beside the application).
func constructors(t *testing.T, db *pgxpool.Pool, pool bustype.PoolParams) (tests.PubSubConstructor, tests.ConsumerGroupPubSubConstructor) {
	riverbustest.StartClient(t, db, &riverbus.Config{Logger: quietLogger})
	logger := watermill.NopLogger{}
	group := func(t *testing.T, consumerGroup string) (message.Publisher, message.Subscriber) {
		pub, err := rbw.NewPublisher(db, rbw.PublisherConfig{}, logger)
		require.NoError(t, err)
		sub, err := rbw.NewSubscriber(db, rbw.SubscriberConfig{
			ConsumerGroup: consumerGroup,
			Pool:          pool,
			Work:          workers.Config{FetchPollInterval: 20 * time.Millisecond, Logger: quietLogger},
			Logger:        quietLogger,
		}, logger)
		require.NoError(t, err)
		return pub, sub
	}
	return func(t *testing.T) (message.Publisher, message.Subscriber) { return group(t, "") }, group
}

// freshSuite returns the suite's constructors over a fresh database.
func freshSuite(t *testing.T, pool bustype.PoolParams) (tests.PubSubConstructor, tests.ConsumerGroupPubSubConstructor) {
	return constructors(t, connect(t, riverbustest.NewDatabaseURL(t)), pool)
}

// features are what riverbus offers a Watermill user: every message of a
// topic is kept (Persistent) and each consumer group (a pool) gets each
// message at least once (ExactlyOnceDelivery false: an Ack lost to a crash
// redelivers). A new subscriber joins its group where the group is, as
// watermill-sql's do: it does not replay what the group consumed
// (NewSubscriberReceivesOldMessages false; a new group starts at the
// beginning, and `riverbus pool reset` replays on demand).
func features(ordered bool) tests.Features {
	return tests.Features{
		ConsumerGroups:      true,
		ExactlyOnceDelivery: false,
		GuaranteedOrder:     ordered,
		Persistent:          true,
	}
}

// TestPubSub runs Watermill's universal Pub/Sub suite against riverbus
// with plain (unordered) pools: parallel delivery, nacks retried on the
// pool's schedule.
func TestPubSub(t *testing.T) {
	t.Parallel()
	pubSub, groupPubSub := freshSuite(t, suitePool(bustype.OrderingNone))
	tests.TestPubSub(t, features(false), pubSub, groupPubSub)
}

// TestPubSubOrdered runs the suite with globally ordered pools, which is
// what Watermill's GuaranteedOrder means: one message of the group at a
// time, in publish order, the next only after the previous one's Ack.
// It uses the suite's short sizes (ForceShort, Watermill's setting for
// Pub/Subs with such limits): a global lane hands messages over one after
// another, and on a loaded two-core machine 1,000 of them took 30 to 105 s
// where the suite allows 15. Parallel delivery is what the full-size run
// (TestPubSub) checks.
func TestPubSubOrdered(t *testing.T) {
	t.Parallel()
	pubSub, groupPubSub := freshSuite(t, suitePool(bustype.OrderingGlobal))
	f := features(true)
	f.ForceShort = true
	tests.TestPubSub(t, f, pubSub, groupPubSub)
}

// TestPubSubReconnect runs the suite's reconnect test: 100 publishers
// append 10,000 messages while the PostgreSQL server they and the
// subscriber use is restarted twice; every message must arrive. The server
// is one of the test's own, restarted by this process when the suite's
// restart command signals it.
func TestPubSubReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a PostgreSQL server: not in -short")
	}
	t.Parallel()
	srv, url := pgtest.NewServer(t)
	db := connect(t, url)
	restarts := make(chan os.Signal, 4)
	signal.Notify(restarts, syscall.SIGUSR1)
	t.Cleanup(func() { signal.Stop(restarts) })
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-restarts:
				if err := srv.Restart(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("restart PostgreSQL: %v", err)
				}
			}
		}
	}()
	pubSub, _ := constructors(t, db, suitePool(bustype.OrderingNone))
	f := features(false)
	f.RestartServiceCommand = []string{"sh", "-c", fmt.Sprintf("kill -USR1 %d", os.Getpid())}
	t.Run("TestReconnect", func(t *testing.T) {
		tests.TestReconnect(t, tests.TestContext{TestID: tests.NewTestID(), Features: f}, pubSub)
	})
}

// TestPubSubStress runs the suite's stress test: copies of the whole suite
// at once on one database, with plain pools, at the suite's short sizes: it
// checks that concurrent subscribers, consumer groups and nacks of many
// topics do not get in each other's way, where TestPubSub checks volume.
// The suite's default is ten copies; make test runs stressCopies, as ten
// take most of an hour on two cores beside the rest of the suite, and
// STRESS_TEST_COUNT=10 runs the suite's ten.
func TestPubSubStress(t *testing.T) {
	if testing.Short() {
		t.Skip("copies of the whole suite: not in -short")
	}
	if os.Getenv("STRESS_TEST_COUNT") == "" {
		_ = os.Setenv("STRESS_TEST_COUNT", strconv.Itoa(stressCopies)) // the suite reads it below
	}
	t.Parallel()
	pubSub, groupPubSub := freshSuite(t, suitePool(bustype.OrderingNone))
	f := features(false)
	f.ForceShort = true
	tests.TestPubSubStressTest(t, f, pubSub, groupPubSub)
}
