package webhook_test

import (
	"context"
	"encoding/json"
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
