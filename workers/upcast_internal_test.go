package workers

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/outbox"
)

// setField returns an upcaster that sets field to value in an object.
func setField(field string, value any) Upcaster {
	return func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		m[field] = value
		return json.Marshal(m)
	}
}

// A chain brings every older version to the top, step by step; an event
// of a type without versions, or at the top, is left as it is.
func TestUpcastEventRunsTheChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := NewRegistry()
	reg.Upcast("order.placed", 1, setField("v2", true))
	reg.Upcast("order.placed", 2, setField("v3", true))
	require.NoError(t, reg.CheckVersions())
	v, ok := reg.VersionOf("order.placed")
	require.True(t, ok)
	require.Equal(t, 3, v)

	for stored, want := range map[int]string{
		0: `{"v2": true, "v3": true}`, // an envelope from before versions: 1
		1: `{"v2": true, "v3": true}`,
		2: `{"v3": true}`,
		3: `{}`,
	} {
		e := outbox.Event{GlobalSequence: 7, Type: "order.placed", Data: json.RawMessage(`{}`), Version: stored}
		require.NoError(t, reg.UpcastEvent(ctx, &e), "stored %d", stored)
		require.Equal(t, 3, e.Version, "stored %d", stored)
		require.JSONEq(t, want, string(e.Data), "stored %d", stored)
	}

	other := outbox.Event{Type: "order.paid", Data: json.RawMessage(`{"x": 1}`), Version: 4}
	require.NoError(t, reg.UpcastEvent(ctx, &other))
	require.Equal(t, 4, other.Version)
	require.JSONEq(t, `{"x": 1}`, string(other.Data))
	old := outbox.Event{Type: "order.paid", Data: json.RawMessage(`{}`)}
	require.NoError(t, reg.UpcastEvent(ctx, &old))
	require.Equal(t, 1, old.Version, "no version is version 1")
	_, ok = reg.VersionOf("order.paid")
	require.False(t, ok)
}

// A failing step (an error, a panic, output that is not JSON), a missing
// one, or an event newer than the handlers know is an *UpcastError naming
// the event, the versions and the cause, and the event is left as it was.
func TestUpcastEventFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := NewRegistry()
	reg.Upcast("order.placed", 2, func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("no sku in the data")
	})
	reg.Upcast("shipped", 1, func(context.Context, json.RawMessage) (json.RawMessage, error) { panic("boom") })
	reg.Upcast("paid", 1, func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"a":`), nil })
	reg.Upcast("paid", 2, setField("x", 1))
	reg.EventVersion("refunded", 2)

	for _, c := range []struct {
		typ     string
		version int
		is      error
		want    string
	}{
		{"order.placed", 2, nil, "upcast event 9 (order.placed) from version 2 to 3 (stored as version 2, handlers know 3): no sku in the data"},
		{"order.placed", 1, ErrNoUpcaster, `upcast event 9 (order.placed) from version 1 to 2 (stored as version 1, handlers know 3): no upcaster from version 1 of "order.placed" is registered`},
		{"order.placed", 4, ErrVersionTooNew, "upcast event 9 (order.placed): version 4 is newer than the version its handlers know (3): deploy workers that know version 4"},
		{"shipped", 1, nil, "upcast event 9 (shipped) from version 1 to 2 (stored as version 1, handlers know 2): upcaster panicked: boom"},
		{"paid", 1, nil, "upcast event 9 (paid) from version 1 to 2 (stored as version 1, handlers know 3): upcaster returned data that is not valid JSON"},
		{"refunded", 3, ErrVersionTooNew, "version 3 is newer than the version its handlers know (2)"},
	} {
		e := outbox.Event{GlobalSequence: 9, Type: c.typ, Data: json.RawMessage(`{"n": 1}`), Version: c.version}
		err := reg.UpcastEvent(ctx, &e)
		var ue *UpcastError
		require.ErrorAs(t, err, &ue, "%s v%d", c.typ, c.version)
		require.Equal(t, c.typ, ue.EventType)
		require.Equal(t, int64(9), ue.GlobalSequence)
		require.Equal(t, c.version, ue.Stored)
		require.ErrorContains(t, err, c.want)
		if c.is != nil {
			require.ErrorIs(t, err, c.is)
		}
		require.Equal(t, c.version, e.Version, "left as it was")
		require.JSONEq(t, `{"n": 1}`, string(e.Data), "left as it was")
	}
}

// An upcaster that changes its input in place does not reach the event.
func TestUpcasterGetsACopy(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	reg.Upcast("t", 1, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		data[1] = 'X' // {"a": ...} becomes {X"a"...: not JSON, but it is a copy
		return json.RawMessage(`{}`), nil
	})
	data := json.RawMessage(`{"a": 1}`)
	e := outbox.Event{Type: "t", Data: data, Version: 1}
	require.NoError(t, reg.UpcastEvent(context.Background(), &e))
	require.Equal(t, `{"a": 1}`, string(data))
}

// Bad registrations are refused when made; a chain with a gap, or that
// goes past the declared version, when checked (the Client's Start).
func TestUpcastRegistrationIsChecked(t *testing.T) {
	t.Parallel()
	up := setField("x", 1)
	reg := NewRegistry()
	require.ErrorContains(t, reg.UpcastSafely("", 1, up), "the event type must not be empty")
	require.ErrorContains(t, reg.UpcastSafely("t", 0, up), `upcaster of "t": from must be a version between 1 and 9999, got 0`)
	require.ErrorContains(t, reg.UpcastSafely("t", outbox.VersionMax, up), "got 10000")
	require.ErrorContains(t, reg.UpcastSafely("t", 1, nil), `upcaster of "t" from version 1 is nil`)
	require.NoError(t, reg.UpcastSafely("t", 1, up))
	require.ErrorContains(t, reg.UpcastSafely("t", 1, up), `"t" already has an upcaster from version 1 to 2`)
	require.PanicsWithError(t, `riverbus: "t" already has an upcaster from version 1 to 2`, func() { reg.Upcast("t", 1, up) })
	require.ErrorContains(t, reg.EventVersionSafely("t", 0), `event version of "t" must be between 1 and 10000, got 0`)
	require.NoError(t, reg.EventVersionSafely("t", 2))
	require.ErrorContains(t, reg.EventVersionSafely("t", 3), `the version of "t" is already declared (2)`)
	require.NoError(t, reg.CheckVersions())

	gap := NewRegistry()
	gap.Upcast("t", 1, up)
	gap.Upcast("t", 3, up)
	gap.Upcast("u", 2, up)
	gap.EventVersion("u", 5)
	gap.Upcast("w", 3, up)
	gap.EventVersion("w", 3)
	require.EqualError(t, gap.CheckVersions(), `riverbus: event versions: "t" has no upcaster from 2 to 3: its chain from version 1 must reach version 4, the version its handlers know; `+
		`"u" has no upcaster from 3 to 4, 4 to 5: its chain from version 2 must reach version 5, the version its handlers know; `+
		`"w" has an upcaster from version 3, but its handlers know version 3 (EventVersion): raise the declared version, or remove the upcaster`)
}

// BenchmarkUpcastingWork is what the registry's wrapper adds to a job's
// Work: nothing to upcast (a type without versions), and a two-step chain
// on a small event.
func BenchmarkUpcastingWork(b *testing.B) {
	ctx := context.Background()
	inner := river.WorkFunc(func(context.Context, *river.Job[benchArgs]) error { return nil })
	for _, c := range []struct {
		name  string
		chain bool
	}{{"no versions", false}, {"chain 1 to 3", true}} {
		b.Run(c.name, func(b *testing.B) {
			reg := NewRegistry()
			if c.chain {
				reg.Upcast("t", 1, setField("b", 2))
				reg.Upcast("t", 2, setField("c", 3))
			}
			w := &upcasting[benchArgs]{worker: inner, reg: reg}
			job := &river.Job[benchArgs]{JobRow: &rivertype.JobRow{}, Args: benchArgs{Args{Event: outbox.Event{
				GlobalSequence: 1, Type: "t", Data: json.RawMessage(`{"a": 1}`), Version: 1}}}}
			for b.Loop() {
				if err := w.Work(ctx, job); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type benchArgs struct{ Args }

func (benchArgs) Kind() string { return "bench" }
