package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/outbox"
)

// PublisherConfig configures a Publisher. The zero value is usable.
type PublisherConfig struct {
	// Payload is how payloads are stored: PayloadExact (the default) or
	// PayloadJSON.
	Payload PayloadEncoding

	// Key returns the event key of a message: the unit of order of a
	// key-ordered pool (a Watermill consumer group created with
	// bustype.OrderingKey). Nil: every event's key is empty, so a
	// key-ordered pool orders all of a topic's events as one key. See
	// KeyFromMetadata.
	Key func(topic string, msg *message.Message) (string, error)

	// Tags returns the tags (name=value) of a message's event, which pools
	// may filter on. Nil: none.
	Tags func(topic string, msg *message.Message) ([]string, error)
}

// KeyFromMetadata returns a PublisherConfig.Key that takes the key from
// the message's metadata entry name (empty when it has none).
func KeyFromMetadata(name string) func(topic string, msg *message.Message) (string, error) {
	return func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get(name), nil }
}

// ErrPublisherClosed is returned by Publish after Close.
var ErrPublisherClosed = errors.New("riverbus watermill: publisher is closed")

// Publisher appends each published message to the riverbus event log as
// an event whose type is the topic (see the package documentation for the
// mapping). It is safe for concurrent use.
type Publisher struct {
	db     outbox.TxBeginner
	tx     pgx.Tx
	cfg    PublisherConfig
	logger watermill.LoggerAdapter

	mu     sync.RWMutex
	closed bool
}

// NewPublisher returns a Publisher that appends each Publish call's
// messages in one transaction of its own on db (a *pgxpool.Pool, say).
func NewPublisher(db outbox.TxBeginner, cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if db == nil {
		return nil, errors.New("riverbus watermill: NewPublisher: db is nil")
	}
	return newPublisher(db, nil, cfg, logger)
}

// NewTxPublisher returns a Publisher that appends in the caller's
// transaction tx, as watermill-sql's publisher over a transaction does: the
// events commit, and are delivered, only if tx commits, together with the
// state the caller changed in it. It is meant for one transaction: make one
// per transaction and drop it after the commit. Its Close does not touch tx.
func NewTxPublisher(tx pgx.Tx, cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	if tx == nil {
		return nil, errors.New("riverbus watermill: NewTxPublisher: tx is nil")
	}
	return newPublisher(nil, tx, cfg, logger)
}

func newPublisher(db outbox.TxBeginner, tx pgx.Tx, cfg PublisherConfig, logger watermill.LoggerAdapter) (*Publisher, error) {
	switch cfg.Payload {
	case "":
		cfg.Payload = PayloadExact
	case PayloadExact, PayloadJSON:
	default:
		return nil, fmt.Errorf("riverbus watermill: PublisherConfig.Payload must be %q or %q, got %q", PayloadExact, PayloadJSON, cfg.Payload)
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &Publisher{db: db, tx: tx, cfg: cfg, logger: logger}, nil
}

// Publish appends msgs as events of type topic, all in one transaction (or
// in the Publisher's transaction): all or none of them are appended. A
// message that cannot be stored exactly (metadata that is not UTF-8 or
// holds NUL, a payload that is not JSON under PayloadJSON) is a
// *MessageError and nothing is appended.
//
// The trace context of each message's context (message.Context) travels
// with its event: a handler's message context continues that trace. The
// first message's context is the append's; it is not cancelled by a
// cancellation of the message's context, as an append that was started
// should commit or fail on its own.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	events := make([]outbox.Event, len(msgs))
	for i, msg := range msgs {
		ev, err := p.event(topic, msg)
		if err != nil {
			return &MessageError{Topic: topic, UUID: msg.UUID, Index: i, Err: err}
		}
		events[i] = ev
	}
	ctx := context.WithoutCancel(msgs[0].Context())
	var err error
	if p.tx != nil {
		_, err = outbox.AppendTx(ctx, p.tx, events...)
	} else {
		_, err = outbox.Append(ctx, p.db, events...)
	}
	if err != nil {
		return fmt.Errorf("riverbus watermill: publish %d messages to topic %q: %w", len(msgs), topic, err)
	}
	p.logger.Trace("published", watermill.LogFields{"topic": topic, "messages": len(msgs)})
	return nil
}

func (p *Publisher) event(topic string, msg *message.Message) (outbox.Event, error) {
	var key string
	var tags []string
	var err error
	if p.cfg.Key != nil {
		if key, err = p.cfg.Key(topic, msg); err != nil {
			return outbox.Event{}, fmt.Errorf("key: %w", err)
		}
	}
	if p.cfg.Tags != nil {
		if tags, err = p.cfg.Tags(topic, msg); err != nil {
			return outbox.Event{}, fmt.Errorf("tags: %w", err)
		}
	}
	return toEvent(topic, msg, p.cfg.Payload, key, tags, traceMembers(msg))
}

// traceMembers returns the W3C trace context of msg for the event's
// metadata: from the span in the message's context, or else from the
// message's own traceparent/tracestate metadata (how Watermill's
// OpenTelemetry middleware carries it), so that riverbus's tracing (River's
// work spans, webhooks) continues it either way.
func traceMembers(msg *message.Message) map[string]string {
	carrier := propagation.MapCarrier{}
	if ctx := msg.Context(); trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, carrier)
	} else if tp := msg.Metadata.Get(outbox.TraceParentKey); tp != "" {
		carrier[outbox.TraceParentKey] = tp
		if ts := msg.Metadata.Get(outbox.TraceStateKey); ts != "" {
			carrier[outbox.TraceStateKey] = ts
		}
	}
	if len(carrier) == 0 {
		return nil
	}
	for k, v := range carrier {
		if storable(v) != nil {
			delete(carrier, k)
		}
	}
	return carrier
}

// Close makes further Publish calls fail with ErrPublisherClosed; it waits
// for the ones in progress. It does not close the pool or end the
// transaction it was given.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}
