package workers_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// GroupArgs.AppendJSON, which the fan-out writes a group's jobs with, gives
// byte for byte what json.Marshal gives the same GroupArgs.
func FuzzGroupJobAppendJSON(f *testing.F) {
	f.Add(int64(42), "757", "k1", false, 1, 1, 0)
	f.Add(int64(1), "9", "", true, 2, 3, 2)
	f.Add(int64(-1), "", `"events":null <&> ✓ `+"\u2028\x00\t", false, 0, 0, 1)
	f.Add(int64(9_223_372_036_854_775_807), "x", "\xff\xfe invalid UTF-8", true, 1, 2, 3)
	f.Fuzz(func(t *testing.T, seq int64, txid, key string, late bool, part, parts, n int) {
		n = max(n, 0) % 4
		events := make([]outbox.Event, n)
		var enc [][]byte
		for i := range events {
			events[i] = outbox.Event{GlobalSequence: seq + int64(i), EventID: uuid.New(), Type: "t", Key: key,
				Tags: []string{txid}, Data: json.RawMessage(`{"k": "` + "<\u2028>" + `"}`), Metadata: json.RawMessage(`{}`),
				OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
			e, err := json.Marshal(events[i])
			require.NoError(t, err)
			enc = append(enc, e)
		}
		j := workers.GroupArgs{GlobalSequence: seq, TransactionID: txid, Key: key, Events: events, Late: late, Part: part, Parts: parts}
		want, err := json.Marshal(j)
		require.NoError(t, err)
		require.Equal(t, string(want), string(j.AppendJSON(nil, bytes.Join(enc, []byte(",")))))
		prefix := []byte("kept")
		require.Equal(t, "kept"+string(want), string(j.AppendJSON(prefix, bytes.Join(enc, []byte(",")))))
	})
}
