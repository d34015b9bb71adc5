package webhook

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// A delivery sends the trace context: the job's span when the worker
// traces, else the event's as the fan-out stored it in the job's metadata,
// else none.
func TestDeliverySendsTraceParent(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		headers []http.Header
	)
	srv := newRecorder(t)
	srv.mux.HandleFunc("/in", func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
	})
	w := newTestWorker(t, Config{URL: srv.URL + "/in"})
	ctx := context.Background()
	const stored = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	// Untraced worker, traced event: the event's context.
	job, body, id := testJob()
	job.Metadata = []byte(`{"traceparent": "` + stored + `", "tracestate": "vendor=abc"}`)
	_, err := w.deliver(ctx, job, body, id)
	require.NoError(t, err)

	// Traced worker: its span's context (a child of the event's).
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x0a, 0xf7}, SpanID: trace.SpanID{1, 2, 3},
		TraceFlags: trace.FlagsSampled})
	_, err = w.deliver(trace.ContextWithSpanContext(ctx, sc), job, body, id)
	require.NoError(t, err)

	// Untraced event: no header.
	require.NoError(t, send(ctx, w))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, headers, 3)
	require.Equal(t, stored, headers[0].Get(HeaderTraceParent))
	require.Equal(t, "vendor=abc", headers[0].Get(HeaderTraceState))
	require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", headers[1].Get(HeaderTraceParent))
	require.Empty(t, headers[2].Get(HeaderTraceParent))
}
