package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// An event Go's encoder refuses (nested deeper than it allows) is a part of
// its own whose encoding fails; its neighbours' parts encode, in order.
func TestGroupBuilderIsolatesUnencodableEvent(t *testing.T) {
	deep := json.RawMessage(strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001))
	b := &groupBuilder{kind: "ledger", txid: "42", key: "k"}
	for i, data := range []json.RawMessage{[]byte(`{"a":1}`), deep, []byte(`{"a":3}`), []byte(`{"a":4}`)} {
		b.add(&event{Event: outbox.Event{GlobalSequence: int64(i + 1), Type: "t", Key: "k", Data: data, Metadata: []byte(`{}`)}})
	}
	units := b.finish()
	require.Len(t, units, 3)
	var firsts []int64
	for _, u := range units {
		firsts = append(firsts, u.first)
	}
	require.Equal(t, []int64{1, 2, 3}, firsts)

	type part struct {
		GlobalSequence int64            `json:"global_sequence"`
		TransactionID  string           `json:"transaction_id"`
		Events         []map[string]any `json:"events"`
		Part, Parts    int
	}
	for i, want := range [][]int64{{1}, {2}, {3, 4}} {
		g := units[i].args.(groupPart)
		require.Equal(t, want, g.sequences)
		require.Equal(t, map[string]any{"global_sequence": want[0], "transaction_id": "42", "key": "k", "part": i + 1, "parts": 3}, g.header())
	}
	for i, want := range []int{1, 0, 2} {
		enc, err := json.Marshal(units[i].args)
		if want == 0 {
			require.ErrorContains(t, err, "encode event 2 of transaction 42")
			continue
		}
		require.NoError(t, err)
		var p part
		require.NoError(t, json.Unmarshal(enc, &p))
		require.Len(t, p.Events, want)
		require.Equal(t, units[i].first, p.GlobalSequence)
		require.Equal(t, "42", p.TransactionID)
		require.Equal(t, i+1, p.Part)
		require.Equal(t, 3, p.Parts)
	}
}
