package outbox_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/riverbus/riverbus/outbox"
)

// Not parallel: it sets the global tracer provider, which the append span
// comes from.
func TestAppendTraceContext(t *testing.T) {
	ctx, bundle := setup(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	tracer := tp.Tracer("test")

	metadata := func(t *testing.T, seq int64) map[string]any {
		t.Helper()
		var m map[string]any
		require.NoError(t, bundle.db.QueryRow(ctx, `SELECT metadata FROM riverbus_event WHERE global_sequence = $1`, seq).Scan(&m))
		return m
	}
	appendSpan := func(t *testing.T, parent trace.SpanContext) tracetest.SpanStub {
		t.Helper()
		for _, s := range exporter.GetSpans() {
			if s.Name == "riverbus.append" && s.Parent.SpanID() == parent.SpanID() {
				return s
			}
		}
		t.Fatalf("no append span under %s in %d spans", parent.SpanID(), len(exporter.GetSpans()))
		return tracetest.SpanStub{}
	}
	traceparent := func(sc trace.SpanContext) string {
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	}

	t.Run("Append", func(t *testing.T) {
		sctx, root := tracer.Start(ctx, "request")
		res, err := outbox.Append(sctx, bundle.db,
			outbox.Event{Type: "a", Data: json.RawMessage(`{}`), Metadata: json.RawMessage(` { "user": "ann" } `)},
			outbox.Event{Type: "b", Data: json.RawMessage(`{}`)})
		root.End()
		require.NoError(t, err)
		span := appendSpan(t, root.SpanContext())
		require.Equal(t, trace.SpanKindProducer, span.SpanKind)
		require.Equal(t, root.SpanContext().TraceID(), span.SpanContext.TraceID())
		for _, a := range res {
			m := metadata(t, a.GlobalSequence)
			require.Equal(t, traceparent(span.SpanContext), m[outbox.TraceParentKey], "the append span's context")
			require.NotContains(t, m, outbox.TraceStateKey, "no tracestate in this trace")
		}
		require.Equal(t, "ann", metadata(t, res[0].GlobalSequence)["user"], "the caller's metadata is kept")
	})

	t.Run("AppendTxWithTraceState", func(t *testing.T) {
		ts, err := trace.ParseTraceState("vendor=abc")
		require.NoError(t, err)
		remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
			TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
		sctx := trace.ContextWithRemoteSpanContext(ctx, remote)
		tx, err := bundle.db.Begin(ctx)
		require.NoError(t, err)
		res, err := outbox.AppendTx(sctx, tx, outbox.Event{Type: "a", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		span := appendSpan(t, remote)
		m := metadata(t, res[0].GlobalSequence)
		require.Equal(t, traceparent(span.SpanContext), m[outbox.TraceParentKey])
		require.Equal(t, "vendor=abc", m[outbox.TraceStateKey])
	})

	t.Run("CallerKeyWins", func(t *testing.T) {
		sctx, root := tracer.Start(ctx, "request")
		defer root.End()
		mine := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		res, err := outbox.Append(sctx, bundle.db, outbox.Event{Type: "a", Data: json.RawMessage(`{}`),
			Metadata: json.RawMessage(`{"traceparent": "` + mine + `"}`)})
		require.NoError(t, err)
		require.Equal(t, mine, metadata(t, res[0].GlobalSequence)[outbox.TraceParentKey])
	})

	t.Run("AppendIf", func(t *testing.T) {
		sctx, root := tracer.Start(ctx, "request")
		res, err := outbox.AppendIf(sctx, bundle.db, outbox.AppendCondition{FailIfEventsMatch: outbox.Query{{Types: []string{"never"}}}},
			outbox.Event{Type: "a", Data: json.RawMessage(`{}`)})
		root.End()
		require.NoError(t, err)
		span := appendSpan(t, root.SpanContext())
		require.Equal(t, traceparent(span.SpanContext), metadata(t, res[0].GlobalSequence)[outbox.TraceParentKey])
	})

	t.Run("FailedAppend", func(t *testing.T) {
		first, err := outbox.Append(ctx, bundle.db, outbox.Event{Type: "a", Data: json.RawMessage(`{}`)})
		require.NoError(t, err)
		sctx, root := tracer.Start(ctx, "request")
		_, err = outbox.Append(sctx, bundle.db, outbox.Event{Type: "a", EventID: first[0].EventID, Data: json.RawMessage(`{}`)})
		root.End()
		require.ErrorIs(t, err, outbox.ErrDuplicate)
		require.Equal(t, codes.Error, appendSpan(t, root.SpanContext()).Status.Code)
	})

	t.Run("NoSpan", func(t *testing.T) {
		before := len(exporter.GetSpans())
		res, err := outbox.Append(ctx, bundle.db, outbox.Event{Type: "a", Data: json.RawMessage(`{}`), Metadata: json.RawMessage(`{"user": "bob"}`)})
		require.NoError(t, err)
		require.Equal(t, map[string]any{"user": "bob"}, metadata(t, res[0].GlobalSequence), "nothing added")
		require.Len(t, exporter.GetSpans(), before, "no span started")
	})

	t.Run("NoTracerProvider", func(t *testing.T) {
		// A span in ctx but no provider configured (OpenTelemetry's no-op
		// default): no append span, and the caller's span context is stored.
		otel.SetTracerProvider(noop.NewTracerProvider())
		defer otel.SetTracerProvider(tp)
		sctx, root := tracer.Start(ctx, "request")
		res, err := outbox.Append(sctx, bundle.db, outbox.Event{Type: "a", Data: json.RawMessage(`{}`)})
		root.End()
		require.NoError(t, err)
		require.Equal(t, traceparent(root.SpanContext()), metadata(t, res[0].GlobalSequence)[outbox.TraceParentKey])
	})
}
