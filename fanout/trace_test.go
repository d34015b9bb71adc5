package fanout_test

import (
	"context"
	"encoding/json"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/fanout"
)

// Every path puts an event's trace context into its job's metadata, where
// River's otelriver middleware reads it: the plain path (SQL), the general
// path of an ordered pool (beside the lane) and a transaction group (its
// first traced event's). Events are appended by SQL, as an appender in
// another language stores a traceparent. The batches' spans link to the
// events' contexts, and the rounds and batches are observed.
func TestJobsCarryTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	createPool(t, b.db, bustype.PoolParams{Name: "plain"})
	createPool(t, b.db, bustype.PoolParams{Name: "keyed", Ordering: bustype.OrderingKey})
	createPool(t, b.db, bustype.PoolParams{Name: "grouped", Grouping: bustype.GroupTransaction})
	exporter := tracetest.NewInMemoryExporter()
	f := newFanout(t, b.db, fanout.Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))})
	roundsBefore := histogramCount(t, fanout.RoundSeconds)

	const (
		tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		tp2 = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
	)
	// One transaction: untraced, traced (with a tracestate), traced, a
	// traceparent that is not a string.
	appendSome := func(key string) []int64 {
		tx, err := b.db.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		var seqs []int64
		for _, meta := range []string{
			`{"user": "ann"}`,
			`{"traceparent": "` + tp1 + `", "tracestate": "vendor=abc", "user": "bob"}`,
			`{"traceparent": "` + tp2 + `"}`,
			`{"traceparent": 5}`,
		} {
			var seq int64
			require.NoError(t, tx.QueryRow(ctx, `INSERT INTO riverbus_event (type, key, data, metadata) VALUES ('t', $1, '{}', $2::jsonb) RETURNING global_sequence`,
				key, meta).Scan(&seq))
			seqs = append(seqs, seq)
		}
		require.NoError(t, tx.Commit(ctx))
		return seqs
	}
	drain := func() {
		for pass(t, f).More {
		}
		pass(t, f)
	}
	first := appendSome("k1")
	drain() // the general path for every pool: the first look
	require.True(t, f.UsesPlainPath("plain"))
	second := appendSome("k2")
	drain() // the plain statement for pool plain (riding on the round)

	traced := map[string]any{"traceparent": tp1, "tracestate": "vendor=abc"}
	want := []map[string]any{{}, traced, {"traceparent": tp2}, {}}
	metadata := func(pool string, seq int64) map[string]any {
		var m map[string]any
		require.NoError(t, b.db.QueryRow(ctx, `SELECT metadata FROM river_job WHERE kind = $1 AND (args->>'global_sequence')::bigint = $2`,
			pool, seq).Scan(&m))
		return m
	}
	for _, seqs := range [][]int64{first, second} {
		for i, seq := range seqs {
			require.Equal(t, want[i], metadata("plain", seq), "plain, event %d", i)
			keyed := map[string]any{"riverbus_lane": metadata("keyed", seq)["riverbus_lane"]}
			require.NotEmpty(t, keyed["riverbus_lane"])
			for k, v := range want[i] {
				keyed[k] = v
			}
			require.Equal(t, keyed, metadata("keyed", seq), "keyed, event %d", i)
		}
		// The group's job is its first event's: its first traced event's
		// context.
		require.Equal(t, traced, metadata("grouped", seqs[0]))
	}

	paths := map[string]bool{}
	for _, s := range exporter.GetSpans() {
		if s.Name != "riverbus.fanout.batch" {
			continue
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.Value
		}
		paths[attrs["riverbus.pool"].AsString()+"/"+attrs["riverbus.fanout.path"].AsString()] = true
		var links []string
		for _, l := range s.Links {
			links = append(links, "00-"+l.SpanContext.TraceID().String()+"-"+l.SpanContext.SpanID().String()+"-01")
		}
		require.Subset(t, links, []string{tp1}, "batch of %s links to the traced events", attrs["riverbus.pool"].AsString())
		require.Equal(t, trace.SpanKindProducer, s.SpanKind)
	}
	require.Subset(t, keys(paths), []string{"plain/general", "keyed/general", "grouped/general"})
	require.True(t, paths["plain/plain"] || paths["plain/ride"], "the plain statement's batch, on its own or riding on the round: %v", keys(paths))
	require.Greater(t, histogramCount(t, fanout.RoundSeconds), roundsBefore, "rounds observed")
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func histogramCount(t *testing.T, h interface{ Write(*dto.Metric) error }) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, h.Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// A job of an event without a trace context costs no allocation for it.
func TestUntracedJobMetadataAllocatesNothing(t *testing.T) {
	metadata := json.RawMessage(`{"user": "ann"}`)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if fanout.JobMetadataOf(metadata) != nil {
			t.Fatal("metadata for an untraced event")
		}
	}))
}
