package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// A server that answers the ping and then drops the next connection (a
// crash or restart in between, as chaos saw a fan-out exit on) is a
// database that is down, not a refusal: the long-running commands' connect
// retries the check for a connection pooler with backoff and says so. A
// relay in front of the real server lets the pool's connection through and
// closes the check's first one unanswered.
func TestConnectRidesOutAServerGoneAfterThePing(t *testing.T) {
	t.Parallel()
	url := pgtest.Relay(t, pgtest.NewDatabase(t), func(n int64) bool { return n != 2 })
	var logs bytes.Buffer
	a := &app{stdout: io.Discard, stderr: io.Discard, logger: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := a.connectRetrying(ctx, url, "riverbus test")
	require.NoError(t, err)
	pool.Close()
	require.Contains(t, logs.String(), "failed the check for a connection pooler; retrying")
	require.Contains(t, logs.String(), "retry_in=")
}
