// Package tracing carries an event's W3C trace context from its append to
// its handler, with the OpenTelemetry API and River's otelriver middleware:
//
//   - outbox stores the append span's context in the event's metadata
//     (outbox.TraceParentKey, outbox.TraceStateKey);
//   - the fan-out copies those keys into each job's metadata (JobMetadata
//     here on the general path, SQL on the plain one), where otelriver
//     reads them;
//   - in a worker, Middleware makes that context the parent of otelriver's
//     work span (which also links to it), so the handler's spans belong to
//     the append's trace;
//   - a webhook delivery sends it on as the traceparent header.
//
// Setup builds the tracer provider a riverbus command uses from the
// standard OTEL_* environment variables.
package tracing

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/outbox"
)

// The metadata keys of a trace context: the W3C header names, which
// otelriver reads and writes in a job's metadata (EnableTracePropagation)
// and outbox writes in an event's.
const (
	TraceParentKey = outbox.TraceParentKey
	TraceStateKey  = outbox.TraceStateKey
)

// Context is a W3C trace context as stored in metadata. The zero value is
// none.
type Context struct {
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// FromMetadata returns the trace context stored in a metadata object (an
// event's or a job's), or the zero Context. Metadata without the
// traceparent key costs a byte search and no allocation.
func FromMetadata(metadata []byte) Context {
	if !bytes.Contains(metadata, []byte(`"`+TraceParentKey+`"`)) {
		return Context{}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(metadata, &m); err != nil {
		return Context{}
	}
	var c Context
	_ = json.Unmarshal(m[TraceParentKey], &c.TraceParent)
	_ = json.Unmarshal(m[TraceStateKey], &c.TraceState)
	return c
}

// SpanContext returns the remote span context c encodes; not valid when c
// is zero or malformed.
func (c Context) SpanContext() trace.SpanContext {
	if c.TraceParent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{TraceParentKey: c.TraceParent}
	if c.TraceState != "" {
		carrier[TraceStateKey] = c.TraceState
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// Middleware returns the River middleware of a worker process that
// traces with tp: Continue, then otelriver's middleware with trace
// propagation, in that order (Continue must run first so that otelriver's
// work span is a child of the event's append span).
func Middleware(tp trace.TracerProvider) []rivertype.Middleware {
	return []rivertype.Middleware{
		&Continue{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider:              tp,
			EnableTracePropagation:      true,
			EnableWorkSpanJobKindSuffix: true,
			EnableSemanticMetrics:       true,
		}),
	}
}

// Continue is a River worker middleware that makes the trace context in a
// job's metadata the remote parent of the job's context, so that the spans
// started while the job is worked (otelriver's work span first) continue
// the trace of the event's append. otelriver alone only links the work
// span to it, in a trace of its own: OpenTelemetry's messaging conventions
// allow either, and a parent puts append and handler in one trace, which is
// what an operator looks for. A job without one passes through.
type Continue struct {
	river.WorkerMiddlewareDefaults
}

// Work implements rivertype.WorkerMiddleware.
func (*Continue) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if sc := FromMetadata(job.Metadata).SpanContext(); sc.IsValid() && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return doInner(ctx)
}
