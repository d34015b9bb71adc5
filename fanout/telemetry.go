package fanout

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/internal/tracing"
)

// The fan-out's own telemetry: a span and a histogram observation for each
// round and each batch this process runs. Spans need a tracer provider
// (Config.TracerProvider); without one the only cost is a nil
// check. Each job's metadata carries its event's trace context either way
// (jobMetadata, sqlJobTraceMetadata): a handler's span is a child of the
// append span, and a batch span, which covers events of many traces, links
// to them (OpenTelemetry's messaging conventions for a batch).

// RoundSeconds is the histogram riverbus_fanout_round_seconds: how long
// the horizon rounds this process ran took, from taking a connection to
// the commit (RoundResult.Took). Package metrics registers it.
var RoundSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Namespace: "riverbus", Subsystem: "fanout", Name: "round_seconds",
	Help:    "Duration of the horizon rounds this process ran, from taking a connection to the commit.",
	Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
})

// BatchSeconds is the histogram riverbus_fanout_batch_seconds{pool}: how
// long this process's pool batches that inserted jobs took, one
// transaction each; a batch that rode on a round is counted from the
// round's send to its result. Package metrics registers it.
var BatchSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Namespace: "riverbus", Subsystem: "fanout", Name: "batch_seconds",
	Help:    "Duration of the pool batches this process ran that inserted jobs, one transaction each.",
	Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
}, []string{"pool"})

// spanLinksMax bounds the links of a batch span: OpenTelemetry's SDK keeps
// 128 by default.
const spanLinksMax = 128

// tracerName is the instrumentation scope of the fan-out's spans.
const tracerName = "github.com/riverbus/riverbus/fanout"

// newTracer returns the fan-out's tracer, nil without a provider.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// roundTelemetry observes a round this instance ran, and gives a round
// that did something (moved the horizon, passed or found a gap or a late
// event) a span, ending at end.
func (f *Fanout) roundTelemetry(r RoundResult, end time.Time) {
	RoundSeconds.Observe(r.Took.Seconds())
	if f.tracer == nil || !(r.Moved || r.ProvenDead > 0 || r.Skipped > 0 || r.Late > 0) {
		return
	}
	_, span := f.tracer.Start(context.Background(), "riverbus.fanout.round",
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(end.Add(-r.Took)),
		trace.WithAttributes(
			attribute.Int64("riverbus.horizon", r.Horizon),
			attribute.Bool("riverbus.horizon.moved", r.Moved),
			attribute.Int64("riverbus.gaps.proven_dead", r.ProvenDead),
			attribute.Int64("riverbus.gaps.skipped", r.Skipped),
			attribute.Int64("riverbus.late_events", r.Late),
		))
	span.End(trace.WithTimestamp(end))
}

// batchTelemetry observes a batch that inserted jobs, started at start,
// and, when tracing, gives it a span linked to the trace contexts of its
// events (traceparents, at most spanLinksMax used).
func (f *Fanout) batchTelemetry(res BatchResult, start time.Time, path string, traceparents []string) {
	if res.Jobs == 0 && res.Late == 0 {
		return
	}
	end := time.Now()
	BatchSeconds.WithLabelValues(res.Pool).Observe(end.Sub(start).Seconds())
	if f.tracer == nil {
		return
	}
	links := make([]trace.Link, 0, min(len(traceparents), spanLinksMax))
	seen := make(map[string]bool, len(traceparents))
	for _, tp := range traceparents {
		if len(links) == spanLinksMax {
			break
		}
		if seen[tp] {
			continue
		}
		seen[tp] = true
		if sc := (tracing.Context{TraceParent: tp}).SpanContext(); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	_, span := f.tracer.Start(context.Background(), "riverbus.fanout.batch",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", "riverbus"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", res.Pool),
			attribute.Int("messaging.batch.message_count", res.Jobs),
			attribute.String("riverbus.pool", res.Pool),
			attribute.String("riverbus.fanout.path", path),
			attribute.Int("riverbus.late_events", res.Late),
			attribute.Int("riverbus.undeliverable", res.Undeliverable),
			attribute.Int64("riverbus.cursor", res.Cursor),
		))
	span.End(trace.WithTimestamp(end))
}

// unitTraceParents returns the traceparents of units, for a batch span's
// links; nil when not tracing.
func (f *Fanout) unitTraceParents(units []unit) []string {
	if f.tracer == nil {
		return nil
	}
	var out []string
	for _, u := range units {
		if u.trace.TraceParent != "" {
			out = append(out, u.trace.TraceParent)
		}
	}
	return out
}
