package engine

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/outbox"
)

// An event Go's encoder refuses (nested deeper than it allows) is a part of
// its own whose encoding fails; its neighbours' parts encode, in order.
func TestGroupBuilderIsolatesUnencodableEvent(t *testing.T) {
	deep := json.RawMessage(strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001))
	b := &groupBuilder{txid: "42", key: "k"}
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
		require.Equal(t, bustype.GroupJob{GlobalSequence: want[0], TransactionID: "42", Key: "k", Part: i + 1, Parts: 3}, g.job)
	}
	for i, want := range []int{1, 0, 2} {
		enc, err := units[i].args.encode()
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

// A part's JSON, written a piece at a time as its events are read, is
// byte for byte encoding/json's encoding of the bustype.GroupJob it stands
// for, whatever the strings hold.
func TestGroupPartIsGroupJobEncoding(t *testing.T) {
	restore := func(e, b int) func() {
		oe, ob := groupPartMaxEvents, groupPartMaxBytes
		groupPartMaxEvents, groupPartMaxBytes = e, b
		return func() { groupPartMaxEvents, groupPartMaxBytes = oe, ob }
	}(2, 1<<20)
	defer restore()
	for _, tc := range []struct {
		txid, key string
		late      bool
	}{
		{"42", "k", false},
		{"7", `"events":null <&> ✓`, true},
		{"9", "", false},
	} {
		b := &groupBuilder{txid: tc.txid, key: tc.key, late: tc.late}
		var evs []outbox.Event
		for i := range 5 {
			e := outbox.Event{GlobalSequence: int64(i + 10), EventID: uuid.New(), Type: "t", Key: tc.key,
				Tags: []string{"a=b"}, Data: json.RawMessage(`{"n": ` + strconv.Itoa(i) + `, "s": "<\u2028>"}`),
				Metadata: json.RawMessage(`{}`), OccurredAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)}
			evs = append(evs, e)
			b.add(&event{Event: e, txid: tc.txid})
		}
		units := b.finish()
		require.Len(t, units, 3)
		for i, u := range units {
			want, err := json.Marshal(bustype.GroupJob{GlobalSequence: evs[2*i].GlobalSequence, TransactionID: tc.txid,
				Key: tc.key, Events: evs[2*i : min(2*i+2, len(evs))], Late: tc.late, Part: i + 1, Parts: 3})
			require.NoError(t, err)
			got, err := u.args.encode()
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
	}
}
