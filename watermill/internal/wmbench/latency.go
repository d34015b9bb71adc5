package wmbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/riverbus/riverbus/internal/benchkit"
)

var latencyMetrics = []metric{
	{"p50", "publish → handler p50", "ms", "lower"},
	{"p99", "publish → handler p99", "ms", "lower"},
	{"rate", "publish rate achieved", "msg/s", "higher"},
	{"handled", "handled rate: messages / first publish → last handled", "msg/s", "higher"},
	{"within", "messages handled within the drain (the others count in p50/p99 at their wait so far)", "%", "higher"},
	{"db_ms", "database time per message", "ms", "lower"},
	{"statements", "statements per message", "", "lower"},
}

// measureLatency: messages published at rate per second, open loop (each
// is due at start + i/rate whatever the earlier ones took) from
// latencyPublishers goroutines, one per Publish call, for latencyDuration;
// the subscriber (in this process; riverbus's with RunFanout, so the
// fan-out runs here too) records now − the publish time each message
// carries.
func measureLatency(ctx context.Context, e *env, side impl, rate int) (sample, string, error) {
	dur := e.ScaledDuration(latencyDuration, benchkit.Least(e.Opts, time.Second, 100*time.Millisecond))
	n := max(1, int(float64(rate)*dur.Seconds()))
	warm := e.Scaled(latencyWarmUp, benchkit.Least(e.Opts, 50, 10))
	// A smoke run's few messages need few publishers, and each connection
	// a server process makes costs more than the messages sent over it.
	pubs := benchkit.Least(e.Opts, latencyPublishers, 2)
	note := fmt.Sprintf("%d messages offered at %d/s (%s) from %d goroutines, 1 per Publish call, open loop; the publish time (taken before the Publish call) travels in a metadata entry, the handler (one goroutine acking each message as it comes) records now − that; after %d warm-up messages consumed and ANALYZE; the subscriber runs in the bench process (riverbus's with RunFanout: the fan-out too)",
		n, rate, dur, pubs, warm)
	p, err := prepare(ctx, e, side, int32(2*pubs))
	if err != nil {
		return nil, "", err
	}
	defer p.close()
	d, pub := p.d, p.pub
	subDB, err := d.Connect(ctx, childConns)
	if err != nil {
		return nil, "", err
	}
	defer subDB.Close()
	sub, err := newSubscriber(side, subDB, subscriberOpts{group: groupLat, runFanout: true, logger: e.Quiet})
	if err != nil {
		return nil, "", err
	}
	defer sub.Close()
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		return nil, "", err
	}
	h := newHandler(msgs)

	// Warm up, then measure from a clean count.
	if _, err := publishAll(ctx, pub, warm, publishers, catchUpPerCall); err != nil {
		return nil, "", fmt.Errorf("warm-up: %w", err)
	}
	// A side that cannot keep up falls behind for the whole run: give it
	// time to catch up, so that its latencies are all counted.
	drain := max(latencyDrainTimeout, 5*dur)
	if err := h.waitFor(ctx, warm, drain); err != nil {
		return nil, "", fmt.Errorf("warm-up: %w", err)
	}
	if err := d.Settle(ctx, p.db); err != nil {
		return nil, "", err
	}
	h.reset()
	if err := d.resetStatements(ctx); err != nil {
		return nil, "", err
	}
	start := time.Now()
	sent := make([]time.Time, n) // each message's publish time
	achieved, err := benchkit.Paced(ctx, n, float64(rate), pubs, func(_ context.Context, i int) error {
		msg := newMessage(i)
		sent[i], _ = publishedAt(msg)
		return pub.Publish(topic, msg)
	})
	if err != nil {
		return nil, "", fmt.Errorf("publish: %w", err)
	}
	// A side that falls behind for good is measured as far as it got: a
	// message still not handled at the end of the drain counts at its wait
	// so far, so its percentiles are lower bounds.
	if err := h.waitFor(ctx, n, drain); err != nil && !errors.Is(err, errDrainTimeout) {
		return nil, "", err
	}
	handled := h.count()
	s := sample{"rate": achieved, "handled": float64(handled) / h.last().Sub(start).Seconds(), "within": 100 * float64(handled) / float64(n)}
	if err := d.addStatements(ctx, s, "", n); err != nil {
		return nil, "", err
	}
	lat, err := h.latencies(sent, time.Now())
	if err != nil {
		return nil, "", err
	}
	s["p50"] = benchkit.Percentile(lat, 50)
	s["p99"] = benchkit.Percentile(lat, 99)
	return s, note, nil
}

// handler acks every message of a subscription as it comes, on one
// goroutine, and keeps each one's publish → handler latency.
type handler struct {
	mu     sync.Mutex
	lat    []float64    // ms
	seen   map[int]bool // the indices of the messages that came
	at     time.Time    // when the last message came
	err    error
	signal chan struct{} // a message came
}

func newHandler(msgs <-chan *message.Message) *handler {
	h := &handler{seen: map[int]bool{}, signal: make(chan struct{}, 1)}
	go func() {
		for msg := range msgs {
			now := time.Now()
			msg.Ack()
			at, err := publishedAt(msg)
			i, ierr := strconv.Atoi(msg.Metadata.Get(indexKey))
			h.mu.Lock()
			if err == nil && ierr != nil {
				err = fmt.Errorf("message %s: metadata %s: %w", msg.UUID, indexKey, ierr)
			}
			if err != nil && h.err == nil {
				h.err = err
			}
			h.seen[i] = true
			h.lat = append(h.lat, float64(now.Sub(at))/float64(time.Millisecond))
			h.at = now
			h.mu.Unlock()
			select {
			case h.signal <- struct{}{}:
			default:
			}
		}
	}()
	return h
}

func (h *handler) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lat = h.lat[:0]
	clear(h.seen)
}

func (h *handler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lat)
}

// errDrainTimeout: not every message came in time.
var errDrainTimeout = errors.New("not every message was handled in time")

// last returns when the last message came.
func (h *handler) last() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at
}

// waitFor waits until n messages came since the last reset, at most
// timeout.
func (h *handler) waitFor(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		got, err := len(h.lat), h.err
		h.mu.Unlock()
		switch {
		case err != nil:
			return err
		case got >= n:
			return nil
		}
		select {
		case <-h.signal:
		case <-deadline.C:
			return fmt.Errorf("%d of %d messages received %s after the last was published: %w", got, n, timeout, errDrainTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// latencies returns the latencies since the last reset, sorted, with
// those of the messages of sent (publish times by index) that did not come
// counted as their wait until now.
func (h *handler) latencies(sent []time.Time, now time.Time) ([]float64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return nil, h.err
	}
	s := slices.Clone(h.lat)
	for i, at := range sent {
		if !h.seen[i] {
			s = append(s, float64(now.Sub(at))/float64(time.Millisecond))
		}
	}
	slices.Sort(s)
	return s, nil
}
