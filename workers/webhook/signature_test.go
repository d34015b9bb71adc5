package webhook_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/workers/webhook"
)

// The published Standard Webhooks test vector: what their libraries verify,
// Sign must produce.
func TestSignStandardWebhooksVector(t *testing.T) {
	t.Setenv("RIVERBUS_TEST_WEBHOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	secret, err := webhook.SecretFromEnv("RIVERBUS_TEST_WEBHOOK_SECRET")
	require.NoError(t, err)
	body := []byte(`{"test": 2432232314}`)
	ts := time.Unix(1614265330, 0)
	sig := webhook.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", sig)

	h := http.Header{}
	h.Set(webhook.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(webhook.HeaderTimestamp, "1614265330")
	// Several entries (a rotation): one matching v1 entry is enough; other
	// versions and garbage are ignored.
	h.Set(webhook.HeaderSignature, "v1a,abc v1,bm9wZQ== v1,!!! "+sig)
	require.NoError(t, webhook.Verify(secret, h, body, -1))
	require.ErrorIs(t, webhook.Verify(secret, h, body, 0), webhook.ErrTimestampOutOfTolerance, "2021 is long ago")
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	secret := []byte("s")
	body := []byte(`{}`)
	now := time.Now()
	signed := func() http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, "id-1")
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		h.Set(webhook.HeaderSignature, webhook.Sign(secret, "id-1", now, body))
		return h
	}
	require.NoError(t, webhook.Verify(secret, signed(), body, 0))

	for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		h := signed()
		h.Del(name)
		require.ErrorIs(t, webhook.Verify(secret, h, body, 0), webhook.ErrInvalidSignature, name)
	}
	h := signed()
	h.Set(webhook.HeaderTimestamp, "soon")
	require.ErrorIs(t, webhook.Verify(secret, h, body, 0), webhook.ErrInvalidSignature)

	future := now.Add(10 * time.Minute)
	h = signed()
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(future.Unix(), 10))
	h.Set(webhook.HeaderSignature, webhook.Sign(secret, "id-1", future, body))
	require.ErrorIs(t, webhook.Verify(secret, h, body, 0), webhook.ErrTimestampOutOfTolerance)

	h = signed()
	h.Set(webhook.HeaderSignature, "v2,"+h.Get(webhook.HeaderSignature)[3:])
	require.ErrorIs(t, webhook.Verify(secret, h, body, 0), webhook.ErrInvalidSignature)

	require.ErrorContains(t, webhook.Verify(nil, signed(), body, 0), "secret is empty")
}

func TestSecretFromEnv(t *testing.T) {
	const name = "RIVERBUS_TEST_WEBHOOK_SECRET"

	_, err := webhook.SecretFromEnv("")
	require.ErrorContains(t, err, "no environment variable named")

	_, err = webhook.SecretFromEnv("RIVERBUS_TEST_SURELY_UNSET_VARIABLE")
	require.EqualError(t, err, "webhook secret: environment variable RIVERBUS_TEST_SURELY_UNSET_VARIABLE is not set")

	t.Setenv(name, "")
	_, err = webhook.SecretFromEnv(name)
	require.EqualError(t, err, "webhook secret: environment variable "+name+" is empty")

	t.Setenv(name, "plain secret")
	secret, err := webhook.SecretFromEnv(name)
	require.NoError(t, err)
	require.Equal(t, []byte("plain secret"), secret)

	t.Setenv(name, "plain secret\n")
	_, err = webhook.SecretFromEnv(name)
	require.ErrorContains(t, err, "white space")

	t.Setenv(name, "whsec_c2VjcmV0")
	secret, err = webhook.SecretFromEnv(name)
	require.NoError(t, err)
	require.Equal(t, []byte("secret"), secret)

	t.Setenv(name, "whsec_not base64!")
	_, err = webhook.SecretFromEnv(name)
	require.ErrorContains(t, err, "not valid base64")

	t.Setenv(name, "whsec_")
	_, err = webhook.SecretFromEnv(name)
	require.ErrorContains(t, err, "no key after whsec_")
}
