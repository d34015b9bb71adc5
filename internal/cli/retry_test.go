package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

func TestPoolRetrySchedule(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)

	r := ok(t, run(t, dbURL, "pool", "create", "hooks", "--retry-base", "2s", "--retry-factor", "3", "--retry-max-delay", "10m", "--retry-jitter", "0.25"))
	require.Contains(t, r.stdout, "created pool hooks")
	ok(t, run(t, dbURL, "pool", "create", "plain"))

	show := func(name string) map[string]any {
		t.Helper()
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(ok(t, run(t, dbURL, "pool", "show", name)).stdout), &p))
		return p["retry"].(map[string]any)
	}
	require.Equal(t, map[string]any{"base": "2s", "factor": 3.0, "max_delay": "10m0s", "jitter": 0.25}, show("hooks"))
	require.Equal(t, map[string]any{"base": "1s", "factor": 2.0, "max_delay": "3m0s", "jitter": 0.1}, show("plain"), "the defaults")

	// update changes the flags given; --retry-jitter 0 turns jitter off.
	r = ok(t, run(t, dbURL, "pool", "update", "hooks", "--retry-max-delay", "1m", "--retry-jitter", "0"))
	require.Contains(t, r.stdout, "retry: base=2s factor=3 max_delay=1m0s jitter=0")
	require.Equal(t, map[string]any{"base": "2s", "factor": 3.0, "max_delay": "1m0s", "jitter": 0.0}, show("hooks"))
	ok(t, run(t, dbURL, "pool", "update", "hooks", "--max-attempts", "4"))
	require.Equal(t, 0.0, show("hooks")["jitter"], "no jitter stays none through other updates")

	r = ok(t, run(t, dbURL, "pool", "list"))
	require.Contains(t, r.stdout, "RETRY")
	require.Contains(t, r.stdout, "2s x3 max 1m0s jitter 0")
	require.Contains(t, r.stdout, "1s x2 max 3m0s jitter 0.1")

	r = ok(t, run(t, dbURL, "status", "--json"))
	var st struct {
		Pools []struct {
			Name  string         `json:"name"`
			Retry map[string]any `json:"retry"`
		} `json:"pools"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, "hooks", st.Pools[0].Name)
	require.Equal(t, "1m0s", st.Pools[0].Retry["max_delay"])

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--retry-base", "0s"}, "--retry-base must be at least 1ms, got 0s"},
		{[]string{"--retry-factor", "0.5"}, "retry factor must be between 1 and 10, got 0.5"},
		{[]string{"--retry-max-delay", "10s", "--retry-base", "1m"}, "retry max delay must be at least the retry base (1m0s), got 10s"},
		{[]string{"--retry-max-delay", "8d"}, `invalid argument "8d" for "--retry-max-delay"`},
		{[]string{"--retry-max-delay", "200h"}, "retry max delay must be at most 168h0m0s, got 200h0m0s"},
		{[]string{"--retry-jitter", "1.5"}, "retry jitter must be between 0 and 1"},
		{[]string{"--retry-jitter", "-0.1"}, "--retry-jitter must be between 0 and 1, got -0.1"},
	} {
		r := run(t, dbURL, append([]string{"pool", "create", "bad", "--from", "now"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
}
