package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus"
	"github.com/riverbus/riverbus/bustype"
	"github.com/riverbus/riverbus/internal/cli"
	"github.com/riverbus/riverbus/internal/testwait"
	"github.com/riverbus/riverbus/workers/webhook"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"https://user:pw@example.com/hook?token=abc", "https://user:xxxxx@example.com/hook?token=xxxxx"},
		{"https://example.com:8443/a/b?x=1&y=2&x=3", "https://example.com:8443/a/b?x=xxxxx&y=xxxxx&x=xxxxx"},
		{"https://ghp_token@example.com/", "https://xxxxx@example.com/"},
		{"https://example.com/hook?s3cret", "https://example.com/hook?xxxxx"},
		{"https://example.com/hook#access_token=abc", "https://example.com/hook#xxxxx"},
		{"https://example.com/hook", "https://example.com/hook"},
		{"http://exa mple.com/%zz?token=abc", "(unparsable URL)"},
	} {
		require.Equal(t, tt.want, webhook.Redact(tt.in), tt.in)
	}
}

// The user info and query values of a webhook's URL never show: not in the
// job's errors or row (River UI shows args, metadata and errors), the dead
// letter, the worker's or River's logs, Client.Status, or the CLI's status
// and dlq output. Neither when the receiver is down, nor when it answers
// 500 with a body that echoes the request's URL and credentials.
func TestURLSecretsNeverShown(t *testing.T) {
	t.Parallel()
	const password, token = "hunter2-pw", "s3cret-token"
	secrets := []string{password, token}

	echo := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cannot handle "+r.URL.RequestURI()+" for "+r.Header.Get("Authorization"), http.StatusInternalServerError)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	for name, host := range map[string]string{"500 echoing the request": strings.TrimPrefix(echo.URL, "http://"), "closed port": closed} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rawURL := "http://user:" + password + "@" + host + "/hook?token=" + token + "&v=1"
			logs := &testwait.Buffer{}
			logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			b := setupWith(t, setupOpts{
				Pool:        bustype.PoolParams{MaxAttempts: 2},
				Webhook:     webhook.Config{URL: rawURL, Logger: logger},
				RiverLogger: logger,
				WorkerLogin: true,
			})
			_, jobID := b.appendEvent(t, "t", "k", `{}`)
			job := waitJobState(t, b.db, jobID, rivertype.JobStateDiscarded)
			require.Len(t, job.Errors, 2)
			require.Contains(t, job.Errors[0], "POST http://user:xxxxx@"+host+"/hook?token=xxxxx&v=xxxxx: ")

			shown := map[string]string{"logs": logs.String()}
			var rows string
			require.NoError(t, b.db.QueryRow(ctx, `SELECT coalesce(string_agg(to_jsonb(j)::text, E'\n'), '') FROM river_job j`).Scan(&rows))
			shown["river_job"] = rows
			require.NoError(t, b.db.QueryRow(ctx, `SELECT coalesce(string_agg(to_jsonb(d)::text, E'\n'), '') FROM riverbus_dead_letter d`).Scan(&rows))
			shown["riverbus_dead_letter"] = rows
			require.Contains(t, rows, "xxxxx", "the dead letter holds the redacted error")

			operator, err := riverbus.NewClient(b.db, nil)
			require.NoError(t, err)
			st, err := operator.Status(ctx)
			require.NoError(t, err)
			stJSON, err := json.Marshal(st)
			require.NoError(t, err)
			shown["Status"] = string(stJSON)

			dbURL := b.db.Config().ConnString()
			for _, args := range [][]string{{"status"}, {"status", "--json"}, {"dlq", "list"}, {"pool", "list"}, {"pool", "show", pool}} {
				var out, errOut bytes.Buffer
				code := cli.Main(append([]string{"--database-url", dbURL}, args...), &out, &errOut)
				require.Equal(t, 0, code, "%v: %s", args, errOut.String())
				shown[strings.Join(args, " ")] = out.String() + errOut.String()
			}
			require.Contains(t, shown["dlq list"], "xxxxx")

			for where, text := range shown {
				for _, s := range secrets {
					require.NotContains(t, text, s, "%s shows a secret of the URL", where)
				}
			}
		})
	}
}
