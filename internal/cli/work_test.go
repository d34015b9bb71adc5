package cli_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/pgtest"
	"github.com/riverbus/riverbus/internal/testwait"
)

// work takes its URL from the environment with --webhook-env, so that its
// credentials are in no argument list, and shows it masked.
func TestWorkWebhookURLFromEnv(t *testing.T) {
	// No t.Parallel: t.Setenv.
	dbURL := pgtest.NewDatabase(t)
	ok(t, run(t, dbURL, "pool", "create", "billing"))
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	t.Setenv("RIVERBUS_TEST_HOOK_URL", "http://user:hunter2-pw@"+host+"/hook?token=s3cret-token")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errOut := &testwait.Buffer{}, &testwait.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.MainContext(ctx, []string{"--database-url", dbURL, "work", "--pool", "billing", "--webhook-env", "RIVERBUS_TEST_HOOK_URL"}, out, errOut)
	}()
	testwait.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(out.String(), "delivering pool billing")
	}, "work to start (stdout %q, stderr %q)", out, errOut)
	cancel()
	require.Equal(t, 0, <-done, errOut.String())
	require.Contains(t, out.String(), "to http://user:xxxxx@"+host+"/hook?token=xxxxx with")
	for _, s := range []string{"hunter2-pw", "s3cret-token"} {
		require.NotContains(t, out.String()+errOut.String(), s)
	}

	r := run(t, dbURL, "work", "--pool", "billing", "--webhook-env", "RIVERBUS_TEST_NO_SUCH_VARIABLE")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--webhook-env: environment variable RIVERBUS_TEST_NO_SUCH_VARIABLE is not set")
	r = run(t, dbURL, "work", "--pool", "billing", "--webhook", srv.URL, "--webhook-env", "RIVERBUS_TEST_HOOK_URL")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "none of the others can be")
	r = run(t, dbURL, "work", "--pool", "billing")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "at least one of the flags in the group [webhook webhook-env] is required")
}
