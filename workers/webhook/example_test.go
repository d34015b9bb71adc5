package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	"github.com/riverbus/riverbus/workers"
	"github.com/riverbus/riverbus/workers/webhook"
)

func ExampleSign() {
	// The Standard Webhooks test vector; its secret is "whsec_" + base64(key).
	key, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	fmt.Println(webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`)))
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// A receiver in Go, as in the package documentation, and two deliveries:
// one signed with its secret, one not.
func Example_receiver() {
	os.Setenv("WEBHOOK_SECRET", "whsec_c2VjcmV0LWZvci10aGUtZXhhbXBsZQ==") //nolint:errcheck
	handle := func(_ context.Context, ev workers.Args) error {
		fmt.Printf("event %d %s %s\n", ev.GlobalSequence, ev.Type, ev.Data)
		return nil
	}

	secret, err := webhook.SecretFromEnv("WEBHOOK_SECRET")
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /events", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil || webhook.Verify(secret, r.Header, body, 0) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized) // retried
			return
		}
		var ev workers.Args // or any struct with the envelope's fields
		if err := json.Unmarshal(body, &ev); err != nil || handle(r.Context(), ev) != nil {
			http.Error(w, "failed", http.StatusInternalServerError) // retried
		} // 200: delivered
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// What the webhook worker sends.
	send := func(key []byte) {
		body := []byte(`{"global_sequence": 7, "event_id": "0196a3c4-0000-7000-8000-000000000001", "type": "invoice.paid", "data": {"cents": 500}}`)
		now := time.Now()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/events", bytes.NewReader(body))
		req.Header.Set("Webhook-Id", "0196a3c4-0000-7000-8000-000000000001")
		req.Header.Set("Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("Webhook-Signature", webhook.Sign(key, "0196a3c4-0000-7000-8000-000000000001", now, body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	send(secret)
	send([]byte("another secret"))
	// Output:
	// event 7 invoice.paid {"cents": 500}
	// 200 OK
	// 401 Unauthorized
}
