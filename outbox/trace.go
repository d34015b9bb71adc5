package outbox

import (
	"bytes"
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C trace context of an append. An append that runs with an active
// span in its context (trace.SpanContextFromContext) starts an append span,
// a child of it, and stores that span's context in each event's metadata
// under TraceParentKey and TraceStateKey, the W3C header names, which are
// also the keys River's otelriver middleware reads from a job's metadata.
// The fan-out copies them into each job's metadata, so the handler's span
// continues the append's trace.
//
// A key the caller's metadata already holds is kept: the caller's value
// wins. Without an active span nothing is added and nothing is allocated.
// An appender in SQL (psql, COPY, another language) stores the same keys
// itself: INSERT ... metadata = '{"traceparent": "00-…-…-01"}'.
const (
	// TraceParentKey is the metadata key of an event's W3C traceparent.
	TraceParentKey = "traceparent"
	// TraceStateKey is the metadata key of an event's W3C tracestate, when
	// the trace has one.
	TraceStateKey = "tracestate"
)

// tracerName is the instrumentation scope of the append span.
const tracerName = "github.com/riverbus/riverbus/outbox"

// appendSpan is an append's span and the metadata members that carry its
// context: `"traceparent":"…"[,"tracestate":"…"]`.
type appendSpan struct {
	span    trace.Span
	members []byte
}

// startAppend starts the span of an append of n events (op names the
// function) when ctx has an active span, from the global tracer provider
// (otel.GetTracerProvider; a no-op one still passes the caller's context
// on). It returns nil, and allocates nothing, when ctx has none.
func startAppend(ctx context.Context, op string, n int) (context.Context, *appendSpan) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, "riverbus.append",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "riverbus"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", op),
			attribute.String("messaging.destination.name", "riverbus_event"),
			attribute.Int("messaging.batch.message_count", n),
		))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	s := &appendSpan{span: span}
	for _, k := range []string{TraceParentKey, TraceStateKey} {
		if v, ok := carrier[k]; ok && v != "" {
			if len(s.members) > 0 {
				s.members = append(s.members, ',')
			}
			kb, _ := json.Marshal(k)
			vb, _ := json.Marshal(v)
			s.members = append(append(append(s.members, kb...), ':'), vb...)
		}
	}
	return ctx, s
}

// end ends the span with what the append returned. A nil s does nothing.
func (s *appendSpan) end(appended []Appended, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	} else if len(appended) > 0 {
		s.span.SetAttributes(attribute.Int64("riverbus.global_sequence", appended[0].GlobalSequence))
		if len(appended) == 1 {
			s.span.SetAttributes(attribute.String("messaging.message.id", appended[0].EventID.String()))
		}
	}
	s.span.End()
}

// metadata returns the caller's metadata (a JSON object, or empty) with
// the trace context's members first, so that a key the caller set wins:
// jsonb keeps the last of duplicate keys. A nil s returns metadata.
func (s *appendSpan) metadata(metadata json.RawMessage) json.RawMessage {
	if s == nil || len(s.members) == 0 {
		return metadata
	}
	rest := bytes.TrimSpace(metadata)
	if len(rest) > 0 && rest[0] == '{' {
		rest = bytes.TrimSpace(rest[1:])
	} else {
		rest = []byte("}")
	}
	out := make([]byte, 0, 1+len(s.members)+1+len(rest))
	out = append(append(out, '{'), s.members...)
	if rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}
