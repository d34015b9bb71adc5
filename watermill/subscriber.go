package watermill

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// DefaultConsumerGroup is the consumer group of a Subscriber whose
// SubscriberConfig.ConsumerGroup is empty: all such subscribers of a topic
// share its pool, and so its messages.
const DefaultConsumerGroup = "watermill"

// CloseTimeoutDefault is how long Close waits for a subscription's River
// client to stop when SubscriberConfig.CloseTimeout is zero.
const CloseTimeoutDefault = 30 * time.Second

// SubscriberConfig configures a Subscriber. The zero value is usable when
// some process runs the fan-out (RunFanout, `riverbus run`, or a
// riverbus.Client that does).
type SubscriberConfig struct {
	// ConsumerGroup names the consumer group: each (group, topic) is one
	// riverbus pool, which gets every event of the topic once, whatever
	// the number of subscribers (processes) of the group. Empty:
	// DefaultConsumerGroup.
	ConsumerGroup string

	// PoolName returns the name of the pool of a group and a topic. Nil:
	// PoolName.
	PoolName func(group, topic string) string

	// Pool holds the settings of the pools the Subscriber creates: ordering
	// (bustype.OrderingKey or OrderingGlobal for Watermill's guaranteed
	// order), MaxAttempts and the Retry schedule a Nack retries on, where
	// a new group starts (From: the beginning of the topic by default, as
	// a new watermill-sql consumer group does), tag filters, priority.
	// Name, Queue and EventTypes are the Subscriber's: the pool's name,
	// a River queue of its own, and the topic. A pool that exists with
	// other settings is refused (riverbus pool update changes them).
	// Grouping must be none: a Watermill message is one event.
	Pool bustype.PoolParams

	// DoNotCreatePools makes Subscribe refuse a topic whose pool does not
	// exist, for deployments where pools are created by the operator
	// (`riverbus pool create`) and the subscriber's role may not.
	DoNotCreatePools bool

	// MaxInFlight is how many of a subscription's jobs it holds at once:
	// messages handed out or waiting to be, not yet acknowledged. Zero:
	// workers.MaxWorkersDefault. It bounds throughput (River fetches at
	// most this many jobs at a time; make bench's Watermill rows show 100
	// consuming twice what 10 does) and what a slow handler risks: a job
	// waiting to be handed out counts against Work.JobTimeout like one
	// handed out, so keep MaxInFlight × a message's handling time well
	// under it. An ordered pool hands out a key's next message only after
	// the previous one is acknowledged, whatever this is.
	MaxInFlight int

	// RunFanout makes the Subscriber run riverbus's horizon and fan-out
	// (and its maintenance) while it has subscriptions. One process doing
	// so is enough, any number is safe; without any, events are appended
	// but never become messages.
	RunFanout bool

	// Fanout configures that fan-out. Ignored without RunFanout.
	Fanout fanout.Config

	// Work holds the River settings of the subscriptions' workers; Work.
	// JobTimeout is how long a handed-out message may stay unacknowledged
	// before it is retried (one minute by default).
	Work workers.Config

	// CloseTimeout is how long Close waits for each subscription to stop.
	// Zero: CloseTimeoutDefault.
	CloseTimeout time.Duration

	// Logger receives riverbus's logs (River's go to Work.Logger). Nil:
	// slog.Default().
	Logger *slog.Logger
}

// ErrSubscriberClosed is returned by Subscribe after Close.
var ErrSubscriberClosed = errors.New("riverbus watermill: subscriber is closed")

// ErrNacked is the error of a job whose message was nacked: River retries
// it on the pool's retry schedule and, after its last attempt, it is a
// dead letter (`riverbus dlq`).
var ErrNacked = errors.New("riverbus watermill: message nacked by the subscriber")

// Subscriber consumes the events of a topic through the consumer group's
// pool: each Subscribe call runs a River client working the pool's queue,
// and each job is one message. Ack completes the job; Nack fails it, so
// that it is retried on the pool's schedule. It is safe for concurrent
// use.
type Subscriber struct {
	db     *pgxpool.Pool
	cfg    SubscriberConfig
	logger watermill.LoggerAdapter
	ops    *riverbus.Client // pool lookups and creation; never started

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	subs    sync.WaitGroup
	fanout  *riverbus.Client // RunFanout: started by the first subscription
}

// NewSubscriber returns a Subscriber over db. Build db with
// riverbus.ConfigurePool when the database or the role may carry a DBA's
// timeouts. Each subscription holds a few connections of db (River's
// listener among them), so size db's MaxConns for the subscriptions a
// process runs.
func NewSubscriber(db *pgxpool.Pool, cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if db == nil {
		return nil, errors.New("riverbus watermill: NewSubscriber: db is nil")
	}
	if cfg.ConsumerGroup == "" {
		cfg.ConsumerGroup = DefaultConsumerGroup
	}
	if cfg.PoolName == nil {
		cfg.PoolName = PoolName
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = workers.MaxWorkersDefault
	}
	if cfg.MaxInFlight < 1 || cfg.MaxInFlight > river.QueueNumWorkersMax {
		return nil, fmt.Errorf("riverbus watermill: SubscriberConfig.MaxInFlight must be between 1 and %d, got %d", river.QueueNumWorkersMax, cfg.MaxInFlight)
	}
	if cfg.Pool.Grouping != "" && cfg.Pool.Grouping != bustype.GroupNone {
		return nil, fmt.Errorf("riverbus watermill: SubscriberConfig.Pool.Grouping must be none (a Watermill message is one event), got %q", cfg.Pool.Grouping)
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = CloseTimeoutDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	ops, err := riverbus.NewClient(db, &riverbus.Config{FanoutDisabled: true, ReportInterval: -1, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("riverbus watermill: %w", err)
	}
	return &Subscriber{db: db, cfg: cfg, logger: logger, ops: ops, closing: make(chan struct{})}, nil
}

// poolNameRule is riverbus's rule for a pool name (it is the River job
// kind): a test checks it against the database's.
var poolNameRule = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{1,99}$`)

// PoolName is the default name of the pool of a consumer group and a
// topic: "group:topic" when that is a valid pool name (letters, digits and
// _ . - :, 2 to 100 characters), otherwise that name with every other
// character turned into _, shortened to fit, and a hash of the group and
// topic appended, so that distinct pairs never share a pool.
func PoolName(group, topic string) string {
	name := group + ":" + topic
	if poolNameRule.MatchString(name) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if r < 128 && (r == '_' || r == '.' || r == ':' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(group + "\x00" + topic))
	s := b.String()
	if len(s) > 100-17 {
		s = s[:100-17]
	}
	if s != "" && (s[0] == '.' || s[0] == ':' || s[0] == '-') {
		s = "_" + s[1:]
	}
	return s + "-" + hex.EncodeToString(sum[:8])
}

// queueName is the River queue of a pool the Subscriber creates: one of
// its own, so that a subscription's River client fetches only its jobs.
func queueName(pool string) string {
	sum := sha256.Sum256([]byte(pool))
	q := bustype.DefaultQueue(pool)
	if len(q) > 40 {
		q = strings.TrimRight(q[:40], "_")
	}
	return "wm_" + q + "_" + hex.EncodeToString(sum[:6])
}

// SubscribeInitialize creates the pool of topic for the Subscriber's
// consumer group (unless it exists), so that events published from now on
// are kept for the group even before it subscribes.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	_, err := s.pool(context.Background(), topic)
	return err
}

func (s *Subscriber) pool(ctx context.Context, topic string) (*bustype.Pool, error) {
	if topic == "" {
		return nil, errors.New("riverbus watermill: the topic is empty (it is the event type: 1 to 255 characters)")
	}
	name := s.cfg.PoolName(s.cfg.ConsumerGroup, topic)
	if s.cfg.DoNotCreatePools {
		p, err := s.ops.PoolGet(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("riverbus watermill: pool %q of group %q and topic %q: %w", name, s.cfg.ConsumerGroup, topic, err)
		}
		return p, nil
	}
	params := s.cfg.Pool
	params.Name = name
	params.Queue = queueName(name)
	params.EventTypes = []string{topic}
	params.Update = false
	p, _, err := s.ops.PoolCreate(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("riverbus watermill: pool %q of group %q and topic %q: %w", name, s.cfg.ConsumerGroup, topic, err)
	}
	return p, nil
}

// Subscribe returns the messages of topic for the Subscriber's consumer
// group, creating its pool if needed. The channel closes when ctx ends or
// the Subscriber closes; a message handed out and not acknowledged by then
// is handed out again (to this group's next subscriber) without using an
// attempt.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSubscriberClosed
	}
	p, err := s.pool(ctx, topic)
	if err != nil {
		return nil, err
	}
	if p.Grouping != bustype.GroupNone && p.Grouping != "" {
		return nil, fmt.Errorf("riverbus watermill: pool %q groups events by transaction; a Watermill subscriber needs one event per job", p.Name)
	}
	if s.cfg.RunFanout && s.fanout == nil {
		f, err := riverbus.NewClient(s.db, &riverbus.Config{Fanout: s.cfg.Fanout, Logger: s.cfg.Logger, ProcessName: "watermill subscriber fan-out"})
		if err != nil {
			return nil, fmt.Errorf("riverbus watermill: fan-out: %w", err)
		}
		if err := f.Start(context.WithoutCancel(ctx)); err != nil {
			return nil, fmt.Errorf("riverbus watermill: start the fan-out: %w", err)
		}
		s.fanout = f
	}

	out := make(chan *message.Message)
	stop := make(chan struct{})
	w := &worker{out: out, stop: stop}
	reg := workers.NewRegistry()
	if err := workers.AddArgsSafely(reg, jobArgs{kind: p.Name}, river.Worker[jobArgs](w), &workers.AddOpts{MaxWorkers: s.cfg.MaxInFlight}); err != nil {
		return nil, fmt.Errorf("riverbus watermill: %w", err)
	}
	client, err := riverbus.NewClient(s.db, &riverbus.Config{
		FanoutDisabled: true,
		Workers:        reg,
		Work:           s.cfg.Work,
		Logger:         s.cfg.Logger,
		ProcessName:    "watermill subscriber " + p.Name,
	})
	if err != nil {
		return nil, fmt.Errorf("riverbus watermill: %w", err)
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("riverbus watermill: subscribe to topic %q (pool %q): %w", topic, p.Name, err)
	}
	s.logger.Debug("subscribed", watermill.LogFields{"topic": topic, "pool": p.Name, "queue": p.Queue})

	s.subs.Add(1)
	go func() {
		defer s.subs.Done()
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		close(stop) // handed-out messages are snoozed back; no new ones
		stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
		defer cancel()
		if err := client.Stop(stopCtx); err != nil {
			s.logger.Error("subscription did not stop cleanly", err, watermill.LogFields{"topic": topic, "pool": p.Name})
		}
		close(out)
	}()
	return out, nil
}

// Close ends every subscription (their channels close) and the fan-out it
// runs, and waits for them. Messages handed out and not acknowledged are
// handed out again to the group's other subscribers.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	f := s.fanout
	s.mu.Unlock()

	s.subs.Wait()
	if f != nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
		defer cancel()
		if err := f.Stop(ctx); err != nil {
			return fmt.Errorf("riverbus watermill: stop the fan-out: %w", err)
		}
	}
	return nil
}

// jobArgs are the args of a subscription's pool jobs. River decodes each
// job into the zero value, which keeps nothing: the worker reads the job's
// encoded args (the event envelope) itself. kind is only set on the value
// given to workers.AddArgsSafely.
type jobArgs struct{ kind string }

func (a jobArgs) Kind() string { return a.kind }

func (*jobArgs) UnmarshalJSON([]byte) error { return nil }

type worker struct {
	river.WorkerDefaults[jobArgs]
	out  chan<- *message.Message
	stop <-chan struct{}
}

// Work hands the job's message out and waits for its Ack or Nack. A
// subscription that stops meanwhile snoozes the job (river.JobSnooze): it
// is handed out again at once, to a subscriber still running, without
// using an attempt.
func (w *worker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	var ev workers.Args
	if err := json.Unmarshal(job.EncodedArgs, &ev); err != nil {
		return fmt.Errorf("riverbus watermill: job %d: args are not an event envelope: %w", job.ID, err)
	}
	msg, err := toMessage(&ev.Event)
	if err != nil {
		return fmt.Errorf("riverbus watermill: job %d: %w", job.ID, err)
	}
	msgCtx := context.WithValue(ctx, eventKey{}, &ev)
	if !trace.SpanContextFromContext(msgCtx).IsValid() {
		if sc := eventSpanContext(ev.Metadata); sc.IsValid() {
			msgCtx = trace.ContextWithRemoteSpanContext(msgCtx, sc)
		}
	}
	msgCtx, cancel := context.WithCancel(msgCtx)
	defer cancel() // a message's context ends with its Ack or Nack
	msg.SetContext(msgCtx)

	select {
	case w.out <- msg:
	case <-w.stop:
		return river.JobSnooze(0)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return ErrNacked
	case <-w.stop:
	case <-ctx.Done():
	}
	// Both may be ready: an Ack that came in wins.
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return ErrNacked
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("riverbus watermill: message %q was not acknowledged in time: %w", msg.UUID, context.Cause(ctx))
	}
	return river.JobSnooze(0)
}

// eventSpanContext returns the trace context an event's metadata carries
// (outbox.TraceParentKey), not valid when it has none.
func eventSpanContext(metadata json.RawMessage) trace.SpanContext {
	var md map[string]json.RawMessage
	if json.Unmarshal(metadata, &md) != nil {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{}
	for _, k := range []string{outbox.TraceParentKey, outbox.TraceStateKey} {
		var v string
		if json.Unmarshal(md[k], &v) == nil && v != "" {
			carrier[k] = v
		}
	}
	if carrier[outbox.TraceParentKey] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

var (
	_ message.Publisher            = (*Publisher)(nil)
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)
