package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/outbox"
	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

// A webhook bound with Bind is worked by a riverbus.Client like any
// handler: the client derives the pool's queue and delivers its events.
func TestBindDeliversThroughAClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)

	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
	}))
	t.Cleanup(srv.Close)

	ws := workers.NewRegistry()
	require.NoError(t, webhook.Bind(ws, webhook.Config{Pool: "Hooks.v2", URL: srv.URL, Logger: discardLogger}, &workers.AddOpts{MaxWorkers: 2}))
	require.Error(t, webhook.Bind(ws, webhook.Config{Pool: "other", URL: "ftp://nowhere"}, nil), "an invalid URL is refused at Bind")

	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws, Logger: discardLogger})
	require.NoError(t, err)
	_, _, err = client.PoolCreate(ctx, bustype.PoolParams{Name: "Hooks.v2"})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })

	_, err = outbox.Append(ctx, db, outbox.Event{Type: "InvoiceIssued", Data: json.RawMessage(`{"n":7}`)})
	require.NoError(t, err)
	select {
	case body := <-bodies:
		var got outbox.Event
		require.NoError(t, json.Unmarshal(body, &got))
		require.Equal(t, int64(1), got.GlobalSequence)
		require.JSONEq(t, `{"n":7}`, string(got.Data))
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook received nothing")
	}
}

// A webhook bound to a registry with upcasters receives each event at the
// version the registry knows of its type, with "version" saying so, signed
// over what it receives; an event of a type without versions comes as
// stored, version 1. A failing upcaster makes a dead letter with the
// reason, and nothing is sent. A transaction group's events are each upcast.
func TestBindDeliversUpcastEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)
	secret := []byte("a secret of at least twenty-four bytes")

	bodies := make(chan []byte, 10) // pool hooks's
	groups := make(chan []byte, 10) // pool hooks-tx's
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, b, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if r.Header.Get(webhook.HeaderPool) == "hooks-tx" {
			groups <- b
			return
		}
		bodies <- b
	}))
	t.Cleanup(srv.Close)

	ws := workers.NewRegistry()
	ws.Upcast("order.placed", 1, func(_ context.Context, data json.RawMessage) (json.RawMessage, error) {
		var v1 struct {
			Item string `json:"item"`
		}
		if err := json.Unmarshal(data, &v1); err != nil || v1.Item == "" {
			return nil, errors.New("no item in the order")
		}
		return json.Marshal(map[string]any{"sku": v1.Item, "qty": 1})
	})
	client, err := riverbus.NewClient(db, &riverbus.Config{Workers: ws, Logger: discardLogger})
	require.NoError(t, err)
	for _, p := range []bustype.PoolParams{
		{Name: "hooks", MaxAttempts: 1, Tags: []string{"single=1"}},
		{Name: "hooks-tx", MaxAttempts: 1, Tags: []string{"batch=1"}, Grouping: bustype.GroupTransaction},
	} {
		require.NoError(t, webhook.Bind(ws, webhook.Config{Pool: p.Name, URL: srv.URL, Secret: secret, Logger: discardLogger}, nil))
		_, _, err = client.PoolCreate(ctx, p)
		require.NoError(t, err)
	}
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })

	single := []string{"single=1"}
	appended, err := outbox.Append(ctx, db,
		outbox.Event{Type: "order.placed", Tags: single, Data: json.RawMessage(`{"item": "a"}`)},
		outbox.Event{Type: "order.placed", Tags: single, Data: json.RawMessage(`{"sku": "b", "qty": 3}`), Version: 2},
		outbox.Event{Type: "order.paid", Tags: single, Data: json.RawMessage(`{"cents": 5}`)},
		outbox.Event{Type: "order.placed", Tags: single, Data: json.RawMessage(`{"nothing": true}`)})
	require.NoError(t, err)
	want := map[int64]string{
		appended[0].GlobalSequence: `{"sku": "a", "qty": 1}`,
		appended[1].GlobalSequence: `{"sku": "b", "qty": 3}`,
		appended[2].GlobalSequence: `{"cents": 5}`,
	}
	versions := map[int64]int{appended[0].GlobalSequence: 2, appended[1].GlobalSequence: 2, appended[2].GlobalSequence: 1}
	for range want {
		select {
		case body := <-bodies:
			var got struct {
				outbox.Event
				Version *int `json:"version"`
			}
			require.NoError(t, json.Unmarshal(body, &got), "%s", body)
			require.NotNil(t, got.Version, "the payload carries the version: %s", body)
			require.Equal(t, versions[got.GlobalSequence], *got.Version, "%s", body)
			require.JSONEq(t, want[got.GlobalSequence], string(got.Data), "%s", body)
		case <-time.After(30 * time.Second):
			t.Fatal("the webhook received too little")
		}
	}

	failed := appended[3].GlobalSequence
	var dls []bustype.DeadLetter
	require.Eventually(t, func() bool {
		dls, err = client.DeadLetterList(ctx, bustype.DeadLetterListParams{Pool: "hooks"})
		require.NoError(t, err)
		return len(dls) > 0
	}, 30*time.Second, 20*time.Millisecond)
	require.Len(t, dls, 1)
	require.Equal(t, failed, dls[0].GlobalSequence)
	require.Contains(t, dls[0].LastError, fmt.Sprintf("upcast event %d (order.placed) from version 1 to 2 (stored as version 1, handlers know 2): no item in the order", failed))
	var stored outbox.Event
	require.NoError(t, json.Unmarshal(dls[0].Args, &stored))
	require.Equal(t, 1, stored.Version)
	require.JSONEq(t, `{"nothing": true}`, string(stored.Data))
	select {
	case body := <-bodies:
		t.Fatalf("a failed upcast was delivered: %s", body)
	default:
	}

	// A transaction group of versions 1 and 2.
	batch := []string{"batch=1"}
	_, err = outbox.Append(ctx, db,
		outbox.Event{Type: "order.placed", Tags: batch, Data: json.RawMessage(`{"item": "g"}`)},
		outbox.Event{Type: "order.placed", Tags: batch, Data: json.RawMessage(`{"sku": "h", "qty": 2}`), Version: 2})
	require.NoError(t, err)
	select {
	case body := <-groups:
		var group struct {
			Events []struct {
				Version int             `json:"version"`
				Data    json.RawMessage `json:"data"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal(body, &group), "%s", body)
		require.Len(t, group.Events, 2, "%s", body)
		for i, data := range []string{`{"sku": "g", "qty": 1}`, `{"sku": "h", "qty": 2}`} {
			require.Equal(t, 2, group.Events[i].Version, "%s", body)
			require.JSONEq(t, data, string(group.Events[i].Data), "%s", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the grouped webhook received nothing")
	}
}
