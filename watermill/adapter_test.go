package watermill_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/riverbustest"
	rbw "github.com/riverbus/riverbus/watermill"
)

type bundle struct {
	ctx    context.Context
	db     *pgxpool.Pool
	client *riverbus.Client // runs the fan-out; the operator API
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := connect(t, riverbustest.NewDatabaseURL(t))
	client := riverbustest.StartClient(t, db, &riverbus.Config{Logger: quietLogger})
	return &bundle{ctx: context.Background(), db: db, client: client}
}

func (b *bundle) publisher(t *testing.T, cfg rbw.PublisherConfig) *rbw.Publisher {
	t.Helper()
	pub, err := rbw.NewPublisher(b.db, cfg, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

func (b *bundle) subscriber(t *testing.T, cfg rbw.SubscriberConfig) *rbw.Subscriber {
	t.Helper()
	cfg.Logger = quietLogger
	cfg.Work.Logger = quietLogger
	if cfg.Work.FetchPollInterval == 0 {
		cfg.Work.FetchPollInterval = 20 * time.Millisecond
	}
	sub, err := rbw.NewSubscriber(b.db, cfg, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func receive(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-msgs:
		require.True(t, ok, "the channel closed")
		return msg
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30 s")
		return nil
	}
}

// Every message comes back as it was published: UUIDs that are no UUID,
// text, binary and empty payloads, metadata in any script, a JSON payload
// under PayloadJSON (as JSON: jsonb normalises it).
func TestRoundTripIsExact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exact := b.publisher(t, rbw.PublisherConfig{})
	sub := b.subscriber(t, rbw.SubscriberConfig{Pool: bustype.PoolParams{Ordering: bustype.OrderingGlobal}})
	msgs, err := sub.Subscribe(b.ctx, "round.trip")
	require.NoError(t, err)

	sent := []*message.Message{
		message.NewMessage(watermill.NewUUID(), []byte("plain text")),
		message.NewMessage("order-42, not a UUID", []byte{0xff, 0x00, 0xfe, 'x', 0x80}),
		message.NewMessage("", nil),
		message.NewMessage(watermill.NewULID(), []byte(`{"b": 1,   "a": [1.50, "\u00e9"]}`)),
		message.NewMessage(watermill.NewUUID(), []byte("emoji 🚀 and \"quotes\" and \\ and \t")),
	}
	sent[0].Metadata.Set("correlation_id", "abc")
	sent[0].Metadata.Set("ключ", "значение ✓")
	sent[0].Metadata.Set("empty", "")
	sent[1].Metadata.Set("content-type", "application/octet-stream")
	require.NoError(t, exact.Publish("round.trip", sent...))

	for _, want := range sent {
		got := receive(t, msgs)
		require.Equal(t, want.UUID, got.UUID)
		require.True(t, bytes.Equal(want.Payload, got.Payload), "payload of %q: %q, want %q", want.UUID, got.Payload, want.Payload)
		if len(want.Metadata) == 0 {
			require.Empty(t, got.Metadata)
		} else {
			require.Equal(t, want.Metadata, got.Metadata)
		}
		ev, ok := rbw.Event(got)
		require.True(t, ok)
		require.Equal(t, "round.trip", ev.Type)
		require.True(t, got.Ack())
	}

	asJSON := b.publisher(t, rbw.PublisherConfig{Payload: rbw.PayloadJSON})
	doc := message.NewMessage(watermill.NewUUID(), []byte(`{"total": 12.5, "items": ["a"]}`))
	require.NoError(t, asJSON.Publish("round.trip", doc))
	got := receive(t, msgs)
	require.Equal(t, doc.UUID, got.UUID)
	require.JSONEq(t, string(doc.Payload), string(got.Payload))
	ev, _ := rbw.Event(got)
	require.JSONEq(t, string(doc.Payload), string(ev.Data), "riverbus's own consumers see the document")
	got.Ack()
}

// What PostgreSQL or JSON cannot store exactly is refused with an error
// naming the message, and nothing of the call is appended.
func TestPublishRefusesWhatCannotRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.publisher(t, rbw.PublisherConfig{})
	good := message.NewMessage(watermill.NewUUID(), []byte("ok"))
	nul := message.NewMessage(watermill.NewUUID(), []byte("ok"))
	nul.Metadata.Set("k", "a\x00b")
	notUTF8 := message.NewMessage(watermill.NewUUID(), []byte("ok"))
	notUTF8.Metadata.Set("k\xff", "v")

	for _, bad := range []*message.Message{nul, notUTF8} {
		err := pub.Publish("refused", good, bad)
		var msgErr *rbw.MessageError
		require.ErrorAs(t, err, &msgErr)
		require.Equal(t, 1, msgErr.Index)
		require.Equal(t, bad.UUID, msgErr.UUID)
		require.Contains(t, err.Error(), "metadata")
	}
	jsonPub := b.publisher(t, rbw.PublisherConfig{Payload: rbw.PayloadJSON})
	err := jsonPub.Publish("refused", message.NewMessage("x", []byte("not json")))
	require.ErrorContains(t, err, "not valid JSON")

	var n int
	require.NoError(t, b.db.QueryRow(b.ctx, "SELECT count(*) FROM riverbus_event WHERE type = 'refused'").Scan(&n))
	require.Zero(t, n)

	_, err = rbw.NewPublisher(b.db, rbw.PublisherConfig{Payload: "xml"}, nil)
	require.ErrorContains(t, err, `"xml"`)
	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("refused", good), rbw.ErrPublisherClosed)
}

// A publisher over the caller's transaction appends with it: rolled back,
// nothing is delivered; committed, its messages are.
func TestTxPublisherCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscriber(t, rbw.SubscriberConfig{})
	msgs, err := sub.Subscribe(b.ctx, "tx.topic")
	require.NoError(t, err)

	tx, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	pub, err := rbw.NewTxPublisher(tx, rbw.PublisherConfig{}, nil)
	require.NoError(t, err)
	require.NoError(t, pub.Publish("tx.topic", message.NewMessage("rolled-back", []byte("x"))))
	require.NoError(t, tx.Rollback(b.ctx))

	tx, err = b.db.Begin(b.ctx)
	require.NoError(t, err)
	pub, err = rbw.NewTxPublisher(tx, rbw.PublisherConfig{}, nil)
	require.NoError(t, err)
	require.NoError(t, pub.Publish("tx.topic", message.NewMessage("committed", []byte("y"))))
	require.NoError(t, tx.Commit(b.ctx))

	got := receive(t, msgs)
	require.Equal(t, "committed", got.UUID)
	got.Ack()
	select {
	case m := <-msgs:
		t.Fatalf("a rolled-back message arrived: %s", m.UUID)
	case <-time.After(time.Second):
	}
}

// A message's trace context reaches the handler's message context: from
// the span of the published message's context, or from a traceparent in
// its metadata (Watermill's OpenTelemetry middleware), which stays in the
// metadata as published.
func TestTraceContextTravels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.publisher(t, rbw.PublisherConfig{})
	sub := b.subscriber(t, rbw.SubscriberConfig{Pool: bustype.PoolParams{Ordering: bustype.OrderingGlobal}})
	msgs, err := sub.Subscribe(b.ctx, "traced")
	require.NoError(t, err)

	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(b.ctx, "publish")
	defer span.End()
	fromSpan := message.NewMessageWithContext(ctx, watermill.NewUUID(), []byte("a"))
	fromMetadata := message.NewMessage(watermill.NewUUID(), []byte("b"))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	fromMetadata.Metadata.Set("traceparent", parent)
	require.NoError(t, pub.Publish("traced", fromSpan))
	require.NoError(t, pub.Publish("traced", fromMetadata))

	got := receive(t, msgs)
	sc := trace.SpanContextFromContext(got.Context())
	require.True(t, sc.IsValid())
	require.Equal(t, span.SpanContext().TraceID(), sc.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), sc.SpanID(), "the handler's parent is the publishing span")
	require.Empty(t, got.Metadata, "the trace context is not added to the message's metadata")
	got.Ack()

	got = receive(t, msgs)
	sc = trace.SpanContextFromContext(got.Context())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, parent, got.Metadata.Get("traceparent"))
	got.Ack()
}

// A Nack fails the job: it comes back on the pool's retry schedule, and
// after its last attempt it is a dead letter, with the reason, that an
// operator can retry.
func TestNackRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.publisher(t, rbw.PublisherConfig{})
	sub := b.subscriber(t, rbw.SubscriberConfig{
		ConsumerGroup: "nacks",
		Pool: bustype.PoolParams{MaxAttempts: 3,
			Retry: bustype.RetrySchedule{Base: 50 * time.Millisecond, Factor: 1, MaxDelay: 50 * time.Millisecond, Jitter: -1}},
	})
	msgs, err := sub.Subscribe(b.ctx, "nacked")
	require.NoError(t, err)
	require.NoError(t, pub.Publish("nacked", message.NewMessage("poison", []byte("x"))))
	for range 3 {
		got := receive(t, msgs)
		require.Equal(t, "poison", got.UUID)
		require.True(t, got.Nack())
		<-got.Context().Done() // a message's context ends with its Nack
	}
	pool := rbw.PoolName("nacks", "nacked")
	var letters []bustype.DeadLetter
	require.Eventually(t, func() bool {
		letters, err = b.client.DeadLetterList(b.ctx, bustype.DeadLetterListParams{Pool: pool})
		require.NoError(t, err)
		return len(letters) == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, 3, letters[0].Attempt)
	require.Contains(t, letters[0].LastError, rbw.ErrNacked.Error())

	_, err = b.client.DeadLetterRetry(b.ctx, letters[0].JobID)
	require.NoError(t, err)
	got := receive(t, msgs)
	require.Equal(t, "poison", got.UUID)
	got.Ack()
}

// A subscription that stops with a message handed out and not acknowledged
// gives it back without using an attempt: with one attempt allowed, the
// group's next subscriber still gets it.
func TestCloseGivesBackUnackedMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.publisher(t, rbw.PublisherConfig{})
	cfg := rbw.SubscriberConfig{ConsumerGroup: "handover", Pool: bustype.PoolParams{MaxAttempts: 1}}
	first := b.subscriber(t, cfg)
	msgs, err := first.Subscribe(b.ctx, "handed")
	require.NoError(t, err)
	require.NoError(t, pub.Publish("handed", message.NewMessage("m", []byte("x"))))
	got := receive(t, msgs)
	require.Equal(t, "m", got.UUID)
	require.NoError(t, first.Close())
	<-got.Context().Done()
	_, open := <-msgs
	require.False(t, open, "Close closes the channel")

	second := b.subscriber(t, cfg)
	msgs, err = second.Subscribe(b.ctx, "handed")
	require.NoError(t, err)
	got = receive(t, msgs)
	require.Equal(t, "m", got.UUID)
	got.Ack()

	_, err = first.Subscribe(b.ctx, "handed")
	require.ErrorIs(t, err, rbw.ErrSubscriberClosed)
}

// Events that no Watermill publisher appended (outbox.Append, SQL, a
// backfill) are messages too: the event id is the UUID, the data the
// payload, the metadata's strings the metadata.
func TestForeignEventsAreMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	appended, err := outbox.Append(b.ctx, b.db, outbox.Event{Type: "native", Key: "k1",
		Data: []byte(`{"n": 1}`), Metadata: []byte(`{"source": "billing", "n": 2}`)})
	require.NoError(t, err)
	sub := b.subscriber(t, rbw.SubscriberConfig{})
	msgs, err := sub.Subscribe(b.ctx, "native")
	require.NoError(t, err)
	got := receive(t, msgs)
	require.Equal(t, appended[0].EventID.String(), got.UUID)
	require.JSONEq(t, `{"n": 1}`, string(got.Payload))
	require.Equal(t, message.Metadata{"source": "billing"}, got.Metadata)
	ev, _ := rbw.Event(got)
	require.Equal(t, appended[0].GlobalSequence, ev.GlobalSequence)
	require.Equal(t, "k1", ev.Key)
	got.Ack()
}

// Consumer groups are pools: each group gets every message once, and the
// subscribers of one group share them. A topic that is no valid pool name
// still gets a pool of its own.
func TestConsumerGroupsArePools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const topic = "orders/créé"
	pub := b.publisher(t, rbw.PublisherConfig{})
	a1 := b.subscriber(t, rbw.SubscriberConfig{ConsumerGroup: "a"})
	a2 := b.subscriber(t, rbw.SubscriberConfig{ConsumerGroup: "a"})
	other := b.subscriber(t, rbw.SubscriberConfig{ConsumerGroup: "b"})
	for _, s := range []*rbw.Subscriber{a1, other} {
		require.NoError(t, s.SubscribeInitialize(topic))
	}
	// Each subscriber's messages are counted by a goroutine of its own,
	// read after its channel closed.
	collect := func(s *rbw.Subscriber) (map[string]int, chan struct{}) {
		msgs, err := s.Subscribe(b.ctx, topic)
		require.NoError(t, err)
		seen := map[string]int{}
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			for msg := range msgs {
				seen[msg.UUID]++
				msg.Ack()
			}
		}()
		return seen, finished
	}
	seenA1, finishedA1 := collect(a1)
	seenA2, finishedA2 := collect(a2)
	seenB, finishedB := collect(other)
	const n = 200
	for i := range n {
		require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte{byte(i)})))
	}
	for _, group := range []string{"a", "b"} {
		require.Eventually(t, func() bool {
			cp, err := b.client.CheckpointGet(b.ctx, rbw.PoolName(group, topic))
			require.NoError(t, err)
			return cp.Checkpoint >= int64(n) && cp.Checkpoint == cp.Cursor
		}, time.Minute, 50*time.Millisecond, "group %s did not finish its messages", group)
	}
	for _, s := range []*rbw.Subscriber{a1, a2, other} {
		require.NoError(t, s.Close())
	}
	<-finishedA1
	<-finishedA2
	<-finishedB
	require.Len(t, seenB, n)
	require.NotEmpty(t, seenA1, "both subscribers of group a took a share")
	require.NotEmpty(t, seenA2, "both subscribers of group a took a share")
	for id, c := range seenA2 {
		seenA1[id] += c
	}
	require.Len(t, seenA1, n, "group a got every message")
	for id, c := range seenA1 {
		require.Equal(t, 1, c, "message %s went to both of group a's subscribers", id)
	}

	pool, err := b.client.PoolGet(b.ctx, rbw.PoolName("a", topic))
	require.NoError(t, err)
	require.Equal(t, []string{topic}, pool.EventTypes)
	require.NotEqual(t, rbw.PoolName("a", topic), rbw.PoolName("a", "orders/cr_"), "distinct topics never share a pool")
}

// Bad settings are refused up front, naming them.
func TestSubscriberRefusesBadSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := rbw.NewSubscriber(b.db, rbw.SubscriberConfig{MaxInFlight: -1}, nil)
	require.ErrorContains(t, err, "MaxInFlight")
	_, err = rbw.NewSubscriber(b.db, rbw.SubscriberConfig{Pool: bustype.PoolParams{Grouping: bustype.GroupTransaction}}, nil)
	require.ErrorContains(t, err, "Grouping")

	sub := b.subscriber(t, rbw.SubscriberConfig{DoNotCreatePools: true})
	_, err = sub.Subscribe(b.ctx, "absent")
	require.ErrorIs(t, err, bustype.ErrUnknownPool)
	_, err = sub.Subscribe(b.ctx, "")
	require.ErrorContains(t, err, "topic is empty")

	ordered := b.subscriber(t, rbw.SubscriberConfig{Pool: bustype.PoolParams{Ordering: bustype.OrderingKey}})
	require.NoError(t, ordered.SubscribeInitialize("settings"))
	plain := b.subscriber(t, rbw.SubscriberConfig{})
	_, err = plain.Subscribe(b.ctx, "settings")
	require.ErrorIs(t, err, bustype.ErrPoolExists, "the group's pool exists with other settings")
	require.False(t, errors.Is(err, bustype.ErrInvalidPool))

	for _, name := range []string{rbw.PoolName("g", "a b"), rbw.PoolName("", "x"), rbw.PoolName("-", "ü"), rbw.PoolName("g", string(make([]byte, 300)))} {
		_, _, err := b.client.PoolCreate(b.ctx, bustype.PoolParams{Name: name})
		require.NoError(t, err, "pool name %q", name)
	}
}
