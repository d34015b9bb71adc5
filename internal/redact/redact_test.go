package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/redact"
)

func TestText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`Post "https://user:pw@host/hook?token=abc": dial tcp 10.0.0.1:443: connect: connection refused`,
			`Post "https://user:xxxxx@host/hook?token=xxxxx": dial tcp 10.0.0.1:443: connect: connection refused`},
		{"POST https://host/hook?token=abc: status 500", "POST https://host/hook?token=xxxxx: status 500"},
		{"see (https://tok@host/x).", "see (https://xxxxx@host/x)."},
		{"no URL here: a:b@c", "no URL here: a:b@c"},
		{"two: http://a:b@h/?q=1 and postgres://u:p@db/x?sslmode=require",
			"two: http://a:xxxxx@h/?q=xxxxx and postgres://u:xxxxx@db/x?sslmode=xxxxx"},
	} {
		require.Equal(t, tt.want, redact.Text(tt.in), tt.in)
	}
}

func TestCredentialsAndValues(t *testing.T) {
	t.Parallel()
	raw := "https://user:p%40ss-word@host/hook?token=s3cret%2Ftoken&v=1#frag-ment"
	creds := redact.Credentials(raw)
	require.Contains(t, creds, "p@ss-word")
	require.Contains(t, creds, "p%40ss-word")
	require.Contains(t, creds, "s3cret/token")
	require.Contains(t, creds, "s3cret%2Ftoken")
	require.Contains(t, creds, "dXNlcjpwQHNzLXdvcmQ=", "the Basic authorization of user:p@ss-word")
	require.Contains(t, creds, "frag-ment")

	echoed := "cannot handle /hook?token=s3cret%2Ftoken&v=1 (token s3cret/token, auth Basic dXNlcjpwQHNzLXdvcmQ=)"
	require.Equal(t, "cannot handle /hook?token=xxxxx&v=1 (token xxxxx, auth Basic xxxxx)", redact.Values(echoed, creds))
}
