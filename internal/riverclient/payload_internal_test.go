package riverclient

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// resolveArgs splices the payloads into the references only: a group's
// other events stay byte for byte, a single event keeps late, and a
// reference the log does not hold is an error naming it.
func TestResolveArgs(t *testing.T) {
	id1, id2 := uuid.New(), uuid.New()
	logged := map[int64]uuid.UUID{1: id1, 3: id2}
	query := func(_ context.Context, seqs []int64, ids []uuid.UUID) ([]int64, []string, []string, error) {
		var found []int64
		var data, metadata []string
		for i, seq := range seqs {
			if logged[seq] == ids[i] {
				found = append(found, seq)
				data = append(data, `{"big": `+string(rune('0'+seq))+`}`)
				metadata = append(metadata, `{}`)
			}
		}
		return found, data, metadata, nil
	}
	ctx := context.Background()

	single := `{"global_sequence": 1, "event_id": "` + id1.String() + `", "type": "t", "key": "k", "tags": [], "occurred_at": "2026-01-01T00:00:00Z", "late": true, "payload_in_log": true}`
	got, err := resolveArgs(ctx, []byte(single), query)
	require.NoError(t, err)
	require.JSONEq(t, `{"global_sequence": 1, "event_id": "`+id1.String()+`", "type": "t", "key": "k", "tags": [], "occurred_at": "2026-01-01T00:00:00Z", "late": true, "data": {"big": 1}, "metadata": {}}`, string(got))

	small := `{"global_sequence":2,"event_id":"` + uuid.NewString() + `","data":{"payload_in_log":true},"metadata":{}}`
	group := `{"global_sequence": 1, "transaction_id": "9", "key": "k", "part": 1, "parts": 1, "events": [` +
		`{"global_sequence": 1, "event_id": "` + id1.String() + `", "payload_in_log": true},` + small + `,` +
		`{"global_sequence": 3, "event_id": "` + id2.String() + `", "payload_in_log": true}]}`
	got, err = resolveArgs(ctx, []byte(group), query)
	require.NoError(t, err)
	var g struct {
		Events []json.RawMessage `json:"events"`
		Part   int               `json:"part"`
	}
	require.NoError(t, json.Unmarshal(got, &g))
	require.Equal(t, 1, g.Part)
	require.Len(t, g.Events, 3)
	require.JSONEq(t, `{"global_sequence": 1, "event_id": "`+id1.String()+`", "data": {"big": 1}, "metadata": {}}`, string(g.Events[0]))
	require.Equal(t, small, string(g.Events[1]), "an event's data that merely holds the key is no reference")
	require.JSONEq(t, `{"global_sequence": 3, "event_id": "`+id2.String()+`", "data": {"big": 3}, "metadata": {}}`, string(g.Events[2]))

	none := []byte(`{"global_sequence":2,"data":{"payload_in_log":true}}`)
	got, err = resolveArgs(ctx, none, query)
	require.NoError(t, err)
	require.Equal(t, string(none), string(got))

	gone := `{"global_sequence": 7, "event_id": "` + uuid.NewString() + `", "payload_in_log": true}`
	_, err = resolveArgs(ctx, []byte(gone), query)
	require.ErrorContains(t, err, "refers to the payload of events [7] in riverbus_event, which no longer holds them")
}
