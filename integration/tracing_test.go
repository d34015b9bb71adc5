package integration_test

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/pools"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers/webhook"
)

// One trace from append to handler across processes: this test appends
// inside a span (the SDK's in-memory exporter), `riverbus fanout` and
// `riverbus work --webhook` run as processes of their own with tracing
// turned on by the standard OTEL_* variables and export their spans over
// OTLP/HTTP to a receiver in this test, and the webhook's receiver (this
// test) continues the traceparent it is sent. The append span is the
// parent of otelriver's work span in the worker process, which is the
// parent of the receiver's span; the fan-out process's batch span links
// to the append span. The span trees are printed in the test log.
func TestTraceAppendToHandlerAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	db := pgtest.Connect(t, dbURL)
	_, _, err := pools.Create(ctx, db, bustype.PoolParams{Name: "traced", MaxAttempts: 3})
	require.NoError(t, err)

	// This process's spans: the application's and the webhook receiver's.
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp) // outbox's append span comes from the global provider
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	tracer := tp.Tracer("integration")

	otlp := &otlpReceiver{}
	otlpSrv := httptest.NewServer(otlp)
	defer otlpSrv.Close()

	var (
		mu       sync.Mutex
		received = map[string]string{} // event id → traceparent header
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e outbox.Event
		if err := json.Unmarshal(body, &e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The receiver continues the trace it is sent, as a traced HTTP
		// server does.
		rctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tracer.Start(rctx, "webhook receiver", trace.WithSpanKind(trace.SpanKindServer))
		span.End()
		mu.Lock()
		received[e.EventID.String()] = r.Header.Get(webhook.HeaderTraceParent)
		mu.Unlock()
	}))
	defer hook.Close()

	otelEnv := func(service string) []string {
		return []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpSrv.URL,
			"OTEL_SERVICE_NAME=" + service,
			"OTEL_BSP_SCHEDULE_DELAY=100",
		}
	}
	fan := start(t, dbURL, "riverbus", append(otelEnv("riverbus-fanout"), "RIVERBUS_LOG_LEVEL=info", "RIVERBUS_POLL_INTERVAL=100ms"), "fanout")
	work := start(t, dbURL, "riverbus", append(otelEnv("riverbus-work"), "RIVERBUS_LOG_LEVEL=info"),
		"work", "--pool", "traced", "--webhook", hook.URL+"/events", "--concurrency", "2")
	work.waitOutput("delivering pool traced", 30*time.Second)
	fan.waitOutput("tracing: exporting spans", 30*time.Second)
	work.waitOutput("tracing: exporting spans", 30*time.Second)

	// Two orders, one after the other, each a trace of its own. (The
	// fan-out process has looked at the pool before they come, so both
	// take the plain statement, mostly riding on the round; package fanout's
	// TestJobsCarryTraceContext covers every path.)
	type order struct {
		root     trace.SpanContext
		appended outbox.Appended
	}
	var orders []order
	for i := range 2 {
		octx, root := tracer.Start(ctx, fmt.Sprintf("place order %d", i+1))
		res, err := outbox.Append(octx, db, outbox.Event{Type: "order.placed", Key: "customer-7",
			Data: json.RawMessage(`{"order": 1}`), Metadata: json.RawMessage(`{"source": "test"}`)})
		root.End()
		require.NoError(t, err)
		orders = append(orders, order{root: root.SpanContext(), appended: res[0]})
		testwait.Eventually(t, 60*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := received[res[0].EventID.String()]
			return ok
		}, "order %d delivered to the webhook", i+1)
	}
	// SIGTERM flushes each process's spans before it exits.
	work.stop()
	fan.stop()

	spans := otlp.spansByService()
	for _, s := range exporter.GetSpans() {
		spans = append(spans, spanOf("test", s))
	}
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.spanID] = s
	}

	for i, o := range orders {
		traceID := o.root.TraceID().String()
		// The append span: a producer span, the child of the caller's.
		appendSpan := findSpan(t, spans, func(s span) bool {
			return s.name == "riverbus.append" && s.traceID == traceID
		}, "order %d: the append span", i+1)
		require.Equal(t, o.root.SpanID().String(), appendSpan.parentID)
		require.Equal(t, "producer", appendSpan.kind)

		// The event and its job carry the append span's context; the
		// caller's metadata is kept.
		var eventMeta, jobMeta map[string]any
		require.NoError(t, db.QueryRow(ctx, `SELECT metadata FROM riverbus_event WHERE global_sequence = $1`,
			o.appended.GlobalSequence).Scan(&eventMeta))
		require.NoError(t, db.QueryRow(ctx, `SELECT metadata FROM river_job WHERE kind = 'traced' AND (args->>'global_sequence')::bigint = $1`,
			o.appended.GlobalSequence).Scan(&jobMeta))
		want := "00-" + traceID + "-" + appendSpan.spanID + "-01"
		require.Equal(t, want, eventMeta[outbox.TraceParentKey])
		require.Equal(t, "test", eventMeta["source"])
		require.Equal(t, want, jobMeta[outbox.TraceParentKey], "the job carries the event's trace context")

		// The fan-out process's batch span links to the append span.
		batch := findSpan(t, spans, func(s span) bool {
			return s.service == "riverbus-fanout" && s.name == "riverbus.fanout.batch" &&
				slices.Contains(s.links, link{traceID: traceID, spanID: appendSpan.spanID})
		}, "order %d: a fan-out batch span linked to the append span", i+1)
		require.Equal(t, "producer", batch.kind)

		// The worker process's work span continues the trace: a child of
		// the append span (and linked to it, as otelriver does).
		workSpan := findSpan(t, spans, func(s span) bool {
			return s.service == "riverbus-work" && s.name == "river.work/traced" && s.traceID == traceID
		}, "order %d: the worker process's work span in the append's trace", i+1)
		require.Equal(t, appendSpan.spanID, workSpan.parentID)
		require.Equal(t, "consumer", workSpan.kind)
		require.Contains(t, workSpan.links, link{traceID: traceID, spanID: appendSpan.spanID})

		// The webhook was sent the work span's context, and the receiver's
		// span is its child.
		mu.Lock()
		header := received[o.appended.EventID.String()]
		mu.Unlock()
		require.Equal(t, "00-"+traceID+"-"+workSpan.spanID+"-01", header)
		recv := findSpan(t, spans, func(s span) bool {
			return s.name == "webhook receiver" && s.traceID == traceID
		}, "order %d: the receiver's span", i+1)
		require.Equal(t, workSpan.spanID, recv.parentID)

		t.Logf("order %d: the span tree of trace %s (fan-out path %s):\n%s", i+1, traceID, batch.attrs["riverbus.fanout.path"],
			spanTree(spans, byID, traceID))
	}
}

// span is a finished span as the test compares them, from either
// exporter.
type span struct {
	service, name, kind       string
	traceID, spanID, parentID string
	start, end                time.Time
	links                     []link
	attrs                     map[string]string
}

type link struct{ traceID, spanID string }

func spanOf(service string, s tracetest.SpanStub) span {
	out := span{service: service, name: s.Name, kind: s.SpanKind.String(),
		traceID: s.SpanContext.TraceID().String(), spanID: s.SpanContext.SpanID().String(),
		start: s.StartTime, end: s.EndTime, attrs: map[string]string{}}
	if s.Parent.IsValid() {
		out.parentID = s.Parent.SpanID().String()
	}
	for _, l := range s.Links {
		out.links = append(out.links, link{traceID: l.SpanContext.TraceID().String(), spanID: l.SpanContext.SpanID().String()})
	}
	for _, a := range s.Attributes {
		out.attrs[string(a.Key)] = a.Value.Emit()
	}
	return out
}

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf): the child
// processes export to it.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, spanOfProto(service, s))
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (o *otlpReceiver) spansByService() []span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.spans)
}

func spanOfProto(service string, s *tracepb.Span) span {
	kind := strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_"))
	out := span{service: service, name: s.GetName(), kind: kind,
		traceID: hex.EncodeToString(s.GetTraceId()), spanID: hex.EncodeToString(s.GetSpanId()),
		parentID: hex.EncodeToString(s.GetParentSpanId()),
		start:    time.Unix(0, int64(s.GetStartTimeUnixNano())), end: time.Unix(0, int64(s.GetEndTimeUnixNano())),
		attrs: map[string]string{}}
	for _, l := range s.GetLinks() {
		out.links = append(out.links, link{traceID: hex.EncodeToString(l.GetTraceId()), spanID: hex.EncodeToString(l.GetSpanId())})
	}
	for _, a := range s.GetAttributes() {
		v := a.GetValue()
		switch {
		case v.GetStringValue() != "":
			out.attrs[a.GetKey()] = v.GetStringValue()
		default:
			out.attrs[a.GetKey()] = fmt.Sprint(v.GetValue())
		}
	}
	return out
}

func findSpan(t *testing.T, spans []span, match func(span) bool, msg string, args ...any) span {
	t.Helper()
	for _, s := range spans {
		if match(s) {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.service+"/"+s.name+" trace "+s.traceID)
	}
	t.Fatalf("no span: %s; spans:\n%s", fmt.Sprintf(msg, args...), strings.Join(names, "\n"))
	return span{}
}

// spanTree renders the spans of traceID as a tree by parent, each with
// its process (service), kind and duration, then the spans of other
// traces that link into it.
func spanTree(spans []span, byID map[string]span, traceID string) string {
	children := map[string][]span{}
	var roots []span
	for _, s := range spans {
		if s.traceID != traceID {
			continue
		}
		if _, ok := byID[s.parentID]; ok && s.parentID != "" {
			children[s.parentID] = append(children[s.parentID], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b span) int { return a.start.Compare(b.start) }
	var b strings.Builder
	line := func(prefix string, s span) {
		fmt.Fprintf(&b, "%s%s  [%s, %s, %s]", prefix, s.name, s.service, s.kind, s.end.Sub(s.start).Round(10*time.Microsecond))
		for _, l := range s.links {
			if target, ok := byID[l.spanID]; ok {
				fmt.Fprintf(&b, "  (link → %s)", target.name)
			}
		}
		b.WriteByte('\n')
	}
	var walk func(s span, indent string)
	walk = func(s span, indent string) {
		kids := children[s.spanID]
		slices.SortFunc(kids, byStart)
		for i, k := range kids {
			branch, next := "├─ ", "│  "
			if i == len(kids)-1 {
				branch, next = "└─ ", "   "
			}
			line(indent+branch, k)
			walk(k, indent+next)
		}
	}
	slices.SortFunc(roots, byStart)
	fmt.Fprintf(&b, "trace %s\n", traceID)
	for _, r := range roots {
		line("", r)
		walk(r, "")
	}
	var linked []span
	for _, s := range spans {
		if s.traceID == traceID {
			continue
		}
		for _, l := range s.links {
			if l.traceID == traceID {
				linked = append(linked, s)
				break
			}
		}
	}
	slices.SortFunc(linked, func(a, b span) int { return cmp.Or(byStart(a, b), strings.Compare(a.name, b.name)) })
	for _, s := range linked {
		fmt.Fprintf(&b, "linked from trace %s:\n", s.traceID)
		line("  ", s)
	}
	return b.String()
}
