package tracing

import (
	"context"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestFromMetadata(t *testing.T) {
	for in, want := range map[string]Context{
		``:                              {},
		`{}`:                            {},
		`{"riverbus_lane": "k"}`:        {},
		`{"traceparent": "` + tp + `"}`: {TraceParent: tp},
		`{"traceparent": "` + tp + `", "tracestate": "v=1"}`: {TraceParent: tp, TraceState: "v=1"},
		`{"traceparent": 5}`:                                      {},
		`{"nested": {"traceparent": "` + tp + `"}}`:               {},
		`{"traceparent": "` + tp + `", "riverbus_lane": "k", "x"`: {}, // not JSON
	} {
		require.Equal(t, want, FromMetadata([]byte(in)), "metadata %s", in)
	}
	require.True(t, Context{TraceParent: tp}.SpanContext().IsValid())
	require.False(t, Context{TraceParent: "00-bad"}.SpanContext().IsValid())
	require.False(t, Context{}.SpanContext().IsValid())
}

// Metadata without a trace context, what every untraced job and event
// has, is looked at without an allocation.
func TestFromMetadataUntracedAllocatesNothing(t *testing.T) {
	metadata := []byte(`{"riverbus_lane": "customer-7"}`)
	require.Zero(t, testing.AllocsPerRun(1000, func() { _ = FromMetadata(metadata) }))
}

func TestContinue(t *testing.T) {
	var got trace.SpanContext
	inner := func(ctx context.Context) error {
		got = trace.SpanContextFromContext(ctx)
		return nil
	}
	c := &Continue{}
	require.NoError(t, c.Work(context.Background(), &rivertype.JobRow{Metadata: []byte(`{"traceparent": "` + tp + `"}`)}, inner))
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", got.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", got.SpanID().String())
	require.True(t, got.IsRemote(), "the append span is the remote parent")

	require.NoError(t, c.Work(context.Background(), &rivertype.JobRow{Metadata: []byte(`{}`)}, inner))
	require.False(t, got.IsValid(), "a job without a trace context passes through")
}

// Not parallel: t.Setenv.
func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
		err  string
	}{
		{env: map[string]string{}, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: false},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin": riverbus exports traces with otlp (or none)`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": riverbus exports OTLP over http/protobuf`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: true},
	} {
		for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
			"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
			t.Setenv(k, tc.env[k])
		}
		got, err := Enabled()
		if tc.err != "" {
			require.EqualError(t, err, tc.err, "%v", tc.env)
			continue
		}
		require.NoError(t, err, "%v", tc.env)
		require.Equal(t, tc.want, got, "%v", tc.env)
	}
}
