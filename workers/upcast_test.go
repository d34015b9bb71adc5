package workers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	"github.com/riverbus/riverbus/workers"
)

// The event type of these tests, "order.placed", in three versions:
//
//	1 {"item": "a"}
//	2 {"sku": "a"}             (item renamed)
//	3 {"sku": "a", "qty": 1}   (qty added, 1 for older orders)
//
// The chain's upcasters fail for data they are told to fail on.
func orderUpcasters(reg *workers.Registry) {
	reg.Upcast("order.placed", 1, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		var v1 struct {
			Item  string `json:"item"`
			Fail  string `json:"fail"`
			Panic bool   `json:"panic"`
		}
		if err := json.Unmarshal(data, &v1); err != nil {
			return nil, err
		}
		switch {
		case v1.Fail == "error":
			return nil, errors.New("no item in the order")
		case v1.Fail == "junk":
			return json.RawMessage(`{"sku":`), nil
		case v1.Panic:
			panic("upcaster bug")
		}
		return json.Marshal(map[string]any{"sku": v1.Item})
	})
	reg.Upcast("order.placed", 2, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		var v2 map[string]any
		if err := json.Unmarshal(data, &v2); err != nil {
			return nil, err
		}
		v2["qty"] = 1
		return json.Marshal(v2)
	})
}

// orderRegistry returns a registry with orderUpcasters' chain and a
// handler of pool "orders" that records what it gets in got.
func orderRegistry(got *seen) *workers.Registry {
	reg := workers.NewRegistry()
	orderUpcasters(reg)
	workers.Add(reg, river.WorkFunc(func(_ context.Context, job *river.Job[orderArgs]) error {
		got.add(job.Args.Event)
		return nil
	}), nil)
	return reg
}

// retriedOrders is pool "orders" with two attempts, 10ms apart.
var retriedOrders = bustype.PoolParams{Name: "orders", MaxAttempts: 2, Retry: bustype.RetrySchedule{Base: 10 * time.Millisecond, Jitter: -1}}

type orderArgs struct{ workers.Args }

func (orderArgs) Kind() string { return "orders" }

type orderTxArgs struct{ workers.GroupArgs }

func (orderTxArgs) Kind() string { return "order-tx" }

// seen is what handlers got, by sequence.
type seen struct {
	mu     sync.Mutex
	events map[int64]outbox.Event
}

func (s *seen) add(e outbox.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		s.events = map[int64]outbox.Event{}
	}
	s.events[e.GlobalSequence] = e
}

func (s *seen) get(seq int64) (outbox.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.events[seq]
	return e, ok
}

// require waits up to 30 seconds for the handler to get event seq, and
// requires it at version with data.
func (s *seen) require(t *testing.T, seq int64, version int, data string) {
	t.Helper()
	require.Eventually(t, func() bool { _, ok := s.get(seq); return ok }, 30*time.Second, 10*time.Millisecond, "event %d handled", seq)
	e, _ := s.get(seq)
	require.Equal(t, version, e.Version, "event %d", seq)
	require.JSONEq(t, data, string(e.Data), "event %d", seq)
}

func appendOrder(t *testing.T, db *pgxpool.Pool, version int, data string) int64 {
	t.Helper()
	a, err := outbox.Append(context.Background(), db, outbox.Event{Type: "order.placed", Key: "o", Data: json.RawMessage(data), Version: version})
	require.NoError(t, err)
	return a[0].GlobalSequence
}

func quietConfig(reg *workers.Registry) *riverbus.Config {
	return &riverbus.Config{Workers: reg, Logger: slog.New(slog.DiscardHandler)}
}

// Events appended at versions 1, 2 and 3 all reach a handler of version 3
// as version 3, through a real Client: one job per event, and a
// transaction group holding several versions. The stored events and the
// jobs' args stay as appended.
func TestUpcastChainReachesTheHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "orders"})
	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "order-tx", Grouping: bustype.GroupTransaction})

	var got seen
	reg := orderRegistry(&got)
	groups := make(chan []outbox.Event, 10)
	workers.Add(reg, river.WorkFunc(func(_ context.Context, job *river.Job[orderTxArgs]) error {
		groups <- job.Args.Events
		return nil
	}), nil)
	client := riverbustest.StartClient(t, db, quietConfig(reg))

	v1 := appendOrder(t, db, 1, `{"item": "a"}`)
	v2 := appendOrder(t, db, 2, `{"sku": "b"}`)
	v3 := appendOrder(t, db, 3, `{"sku": "c", "qty": 5}`)
	riverbustest.WaitForSequence(t, client, "orders", v3, 30*time.Second)
	got.require(t, v1, 3, `{"sku": "a", "qty": 1}`)
	got.require(t, v2, 3, `{"sku": "b", "qty": 1}`)
	got.require(t, v3, 3, `{"sku": "c", "qty": 5}`)

	// One transaction, two versions: the group's handler gets both as 3.
	a, err := outbox.Append(ctx, db,
		outbox.Event{Type: "order.placed", Key: "o", Data: json.RawMessage(`{"item": "d"}`)},
		outbox.Event{Type: "order.placed", Key: "o", Data: json.RawMessage(`{"sku": "e"}`), Version: 2})
	require.NoError(t, err)
	riverbustest.WaitForSequence(t, client, "order-tx", a[1].GlobalSequence, 30*time.Second)
	var group []outbox.Event
	for g := range groups {
		if g[len(g)-1].GlobalSequence == a[1].GlobalSequence {
			group = g
			break
		}
	}
	require.Len(t, group, 2)
	for i, sku := range []string{"d", "e"} {
		require.Equal(t, 3, group[i].Version)
		require.JSONEq(t, `{"sku": "`+sku+`", "qty": 1}`, string(group[i].Data))
	}

	// As stored: the log and the jobs' args.
	var version int
	var data, args string
	require.NoError(t, db.QueryRow(ctx, `SELECT e.version, e.data::text, j.args::text FROM riverbus_event e
		JOIN river_job j ON j.kind = 'orders' AND (j.args->>'global_sequence')::bigint = e.global_sequence
		WHERE e.global_sequence = $1`, v1).Scan(&version, &data, &args))
	require.Equal(t, 1, version)
	require.JSONEq(t, `{"item": "a"}`, data)
	var stored workers.Args
	require.NoError(t, json.Unmarshal([]byte(args), &stored))
	require.Equal(t, 1, stored.Version)
	require.JSONEq(t, `{"item": "a"}`, string(stored.Data))
}

// A failing upcaster (an error, a panic, output that is not JSON) fails
// the job with a reason naming the event, its type and versions and the
// cause; after the pool's attempts it is a dead letter that keeps the
// stored event, version 1, and never reaches the handler. The next event
// is handled.
func TestFailingUpcasterMakesADeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	riverbustest.CreatePool(t, db, retriedOrders)

	var got seen
	reg := orderRegistry(&got)
	client := riverbustest.StartClient(t, db, quietConfig(reg))

	failing := map[int64]string{
		appendOrder(t, db, 1, `{"fail": "error"}`): "no item in the order",
		appendOrder(t, db, 1, `{"panic": true}`):   "upcaster panicked: upcaster bug",
		appendOrder(t, db, 1, `{"fail": "junk"}`):  "upcaster returned data that is not valid JSON",
	}
	ok := appendOrder(t, db, 1, `{"item": "z"}`)
	riverbustest.WaitForSequence(t, client, "orders", ok, 60*time.Second)

	dls, err := client.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "orders"})
	require.NoError(t, err)
	require.Len(t, dls, len(failing))
	for _, dl := range dls {
		cause, isFailing := failing[dl.GlobalSequence]
		require.True(t, isFailing, "dead letter of event %d", dl.GlobalSequence)
		want := fmt.Sprintf("upcast event %d (order.placed) from version 1 to 2 (stored as version 1, handlers know 3): %s", dl.GlobalSequence, cause)
		require.Equal(t, 2, dl.Attempt, "retried on the pool's schedule")
		for _, e := range dl.Errors {
			require.True(t, strings.HasPrefix(e.Error, want), "attempt %d: %q", e.Attempt, e.Error)
		}
		one, err := client.DeadLetterGet(ctx, dl.JobID)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(one.LastError, want), one.LastError)
		var stored workers.Args
		require.NoError(t, json.Unmarshal(one.Args, &stored))
		require.Equal(t, 1, stored.Version, "the stored version")
		require.NotContains(t, string(stored.Data), "sku", "the stored data")
		_, handled := got.get(dl.GlobalSequence)
		require.False(t, handled, "event %d reached the handler", dl.GlobalSequence)
	}
	got.require(t, ok, 3, `{"sku": "z", "qty": 1}`)
}

// An event newer than the handlers know (an appender running a newer build
// than the worker) is neither skipped nor mangled: its job fails with a
// reason that says so, is retried, and ends a dead letter, which a worker
// that knows the version then handles.
func TestNewerVersionIsNotSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	riverbustest.CreatePool(t, db, retriedOrders)

	var old seen
	reg := orderRegistry(&old)
	client, err := riverbus.NewClient(db, quietConfig(reg))
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))

	newer := appendOrder(t, db, 4, `{"sku": "n", "qty": 2, "gift": true}`)
	riverbustest.WaitForSequence(t, client, "orders", newer, 60*time.Second)
	require.NoError(t, client.Stop(ctx))
	_, handled := old.get(newer)
	require.False(t, handled, "the older worker handed a version-4 event to its version-3 handler")
	dls, err := client.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "orders"})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, newer, dls[0].GlobalSequence)
	require.Equal(t, 2, dls[0].Attempt, "retried, so that a newer worker may take it")
	require.Contains(t, dls[0].LastError, fmt.Sprintf("upcast event %d (order.placed): version 4 is newer than the version its handlers know (3): deploy workers that know version 4", newer))

	// A worker that knows version 4 takes it.
	var got seen
	reg4 := orderRegistry(&got)
	reg4.Upcast("order.placed", 3, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) { return data, nil })
	client4 := riverbustest.StartClient(t, db, quietConfig(reg4))
	_, err = client4.DeadLetterRetry(ctx, dls[0].JobID)
	require.NoError(t, err)
	got.require(t, newer, 4, `{"sku": "n", "qty": 2, "gift": true}`)
}

// A job inserted before events had versions (by an older fan-out) has no
// "version" in its args: its event is version 1, upcast like any other, and
// an event of a type without versions reaches its handler as version 1.
func TestArgsWithoutVersionAreVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := riverbustest.NewDatabase(t)
	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "orders"})

	var got seen
	reg := orderRegistry(&got)
	riverbustest.StartClient(t, db, quietConfig(reg))

	for seq, typ := range map[int64]string{1001: "order.placed", 1002: "order.paid"} {
		args, err := json.Marshal(workers.Args{Event: outbox.Event{GlobalSequence: seq, Type: typ, Key: "o", Tags: []string{},
			Data: json.RawMessage(`{"item": "old"}`), Metadata: json.RawMessage(`{}`), OccurredAt: time.Now()}})
		require.NoError(t, err)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(args, &m))
		delete(m, "version")
		old, err := json.Marshal(m)
		require.NoError(t, err)
		_, err = db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state)
			SELECT $1, name, max_attempts, priority, queue, 'available' FROM riverbus_pool WHERE name = 'orders'`, old)
		require.NoError(t, err)
	}
	got.require(t, 1001, 3, `{"sku": "old", "qty": 1}`)
	got.require(t, 1002, 1, `{"item": "old"}`)
}

// Start refuses a chain with a gap before it works anything.
func TestStartRefusesAChainWithAGap(t *testing.T) {
	t.Parallel()
	db := riverbustest.NewDatabase(t)
	riverbustest.CreatePool(t, db, bustype.PoolParams{Name: "orders"})
	reg := workers.NewRegistry()
	up := func(_ context.Context, data json.RawMessage) (json.RawMessage, error) { return data, nil }
	reg.Upcast("order.placed", 1, up)
	reg.Upcast("order.placed", 3, up)
	workers.Add(reg, river.WorkFunc(func(context.Context, *river.Job[orderArgs]) error { return nil }), nil)
	client, err := riverbus.NewClient(db, quietConfig(reg))
	require.NoError(t, err)
	err = client.Start(context.Background())
	require.ErrorContains(t, err, `"order.placed" has no upcaster from 2 to 3: its chain from version 1 must reach version 4`)
}
