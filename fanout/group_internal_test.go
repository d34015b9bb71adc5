package fanout

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
)

// An event that can never be delivered is a part of its own, so it alone
// becomes the dead letter; its neighbours' parts go on, in order, and are
// cut by events and by bytes.
func TestGroupBuilderCutsParts(t *testing.T) {
	oe, ob := groupPartMaxEvents, groupPartMaxBytes
	groupPartMaxEvents, groupPartMaxBytes = 3, 100
	defer func() { groupPartMaxEvents, groupPartMaxBytes = oe, ob }()

	b := &groupBuilder{txid: "42", key: "k", late: true}
	for i, ev := range []struct {
		size int64
		dead string
	}{{10, ""}, {10, "too deep"}, {10, ""}, {10, ""}, {10, ""}, {10, ""}, {95, ""}, {500, ""}, {1, ""}} {
		b.add(&event{Event: outbox.Event{GlobalSequence: int64(i + 1), Key: "k"}, txid: "42", size: ev.size}, ev.dead)
	}
	units := b.finish()
	var got [][]int64
	for i, u := range units {
		got = append(got, u.seqs)
		require.Equal(t, u.seqs[0], u.first)
		require.Equal(t, &workers.GroupArgs{GlobalSequence: u.first, TransactionID: "42", Key: "k", Late: true,
			Part: i + 1, Parts: len(units)}, u.group)
		require.True(t, u.late)
	}
	// 3 events at most; 100 bytes at most, but an event bigger than that
	// is a part of its own.
	require.Equal(t, [][]int64{{1}, {2}, {3, 4, 5}, {6}, {7}, {8}, {9}}, got)
	require.Equal(t, "too deep", units[1].undeliverable)
	for i, u := range units {
		if i != 1 {
			require.Empty(t, u.undeliverable, i)
		}
	}
}
