package workers_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/jobtest"
	"github.com/riverbus/riverbus/workers"
)

type invoice struct {
	Invoice string `json:"invoice"`
	Cents   int    `json:"cents"`
}

func TestDecode(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		got, err := workers.Decode[invoice](jobtest.Event(1, "invoice.paid", `{"invoice": "inv-1", "cents": 1250}`))
		require.NoError(t, err)
		require.Equal(t, invoice{Invoice: "inv-1", Cents: 1250}, got)
	})

	t.Run("UnknownFieldsIgnored", func(t *testing.T) {
		t.Parallel()
		ev := jobtest.Event(1, "invoice.paid", `{"invoice": "inv-1", "cents": 1250, "currency": "EUR"}`)
		got, err := workers.Decode[invoice](ev)
		require.NoError(t, err)
		require.Equal(t, invoice{Invoice: "inv-1", Cents: 1250}, got)

		_, err = workers.DecodeStrict[invoice](ev)
		var decErr *workers.DecodeError
		require.ErrorAs(t, err, &decErr)
		require.EqualError(t, err, `decode data of event 1 (invoice.paid) into workers_test.invoice: json: unknown field "currency"`)
	})

	t.Run("WrongType", func(t *testing.T) {
		t.Parallel()
		ev := jobtest.Event(7, "invoice.paid", `{"invoice": "inv-1", "cents": "twelve"}`)
		ev.EventID = uuid.MustParse("0195c0de-0000-7000-8000-000000000007")
		got, err := workers.Decode[invoice](ev)
		require.Equal(t, invoice{}, got)
		var decErr *workers.DecodeError
		require.ErrorAs(t, err, &decErr)
		require.Equal(t, int64(7), decErr.GlobalSequence)
		require.Equal(t, ev.EventID, decErr.EventID)
		require.Equal(t, "invoice.paid", decErr.EventType)
		require.Equal(t, "workers_test.invoice", decErr.Target)
		var typeErr *json.UnmarshalTypeError
		require.ErrorAs(t, err, &typeErr, "the json error is unwrapped")
	})

	for name, data := range map[string]string{
		"Empty":    ``,
		"Blank":    `  `,
		"Invalid":  `{"invoice": `,
		"Trailing": `{"invoice": "inv-1"} {}`,
		"NotAnObj": `[1, 2]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := workers.Decode[invoice](jobtest.Event(3, "invoice.paid", data))
			var decErr *workers.DecodeError
			require.ErrorAs(t, err, &decErr)
			require.Equal(t, int64(3), decErr.GlobalSequence)
			require.Error(t, errors.Unwrap(err))
		})
	}

	t.Run("Messages", func(t *testing.T) {
		t.Parallel()
		_, err := workers.Decode[invoice](jobtest.Event(3, "invoice.paid", ``))
		require.EqualError(t, err, "decode data of event 3 (invoice.paid) into workers_test.invoice: event has no data")
		_, err = workers.Decode[invoice](jobtest.Event(3, "invoice.paid", `{} x`))
		require.EqualError(t, err, "decode data of event 3 (invoice.paid) into workers_test.invoice: unexpected data after the JSON value")
	})

	t.Run("NullIsZero", func(t *testing.T) {
		t.Parallel()
		got, err := workers.Decode[*invoice](jobtest.Event(1, "invoice.paid", `null`))
		require.NoError(t, err)
		require.Nil(t, got)
	})
}

func TestArgsJSON(t *testing.T) {
	t.Parallel()
	a := workers.Args{Event: jobtest.Event(5, "invoice.paid", `{"cents":1}`)}
	b, err := json.Marshal(a)
	require.NoError(t, err)
	require.JSONEq(t, `{"global_sequence": 5, "event_id": "00000000-0000-0000-0000-000000000000", "type": "invoice.paid",
		"key": "key-5", "tags": [], "data": {"cents": 1}, "metadata": {}, "occurred_at": "2025-01-02T03:04:05Z", "version": 1}`, string(b))

	a.Late = true
	b, err = json.Marshal(a)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, true, m["late"])

	var back workers.Args
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, a, back)
}
