package outbox

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// Without a span in ctx, tracing an append costs a check: no span, no
// metadata key, no allocation.
func TestAppendUntracedAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	metadata := json.RawMessage(`{"user": "ann"}`)
	allocs := testing.AllocsPerRun(1000, func() {
		_, span := startAppend(ctx, "Append", 1)
		if got := span.metadata(metadata); &got[0] != &metadata[0] {
			t.Fatal("metadata changed")
		}
		span.end(nil, nil)
	})
	require.Zero(t, allocs)
}

func TestAppendSpanMetadata(t *testing.T) {
	s := &appendSpan{members: []byte(`"traceparent":"00-x-y-01"`)}
	for in, want := range map[string]string{
		``:                      `{"traceparent":"00-x-y-01"}`,
		`{}`:                    `{"traceparent":"00-x-y-01"}`,
		` { } `:                 `{"traceparent":"00-x-y-01"}`,
		`{"a": 1}`:              `{"traceparent":"00-x-y-01","a": 1}`,
		` {"traceparent": "z"}`: `{"traceparent":"00-x-y-01","traceparent": "z"}`,
	} {
		require.Equal(t, want, string(s.metadata(json.RawMessage(in))), "metadata %q", in)
	}
}
