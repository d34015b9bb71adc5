package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/internal/pgtest"
)

// Migration 013: riverbus jobs (args with a global_sequence) stay out of
// River's GIN index on args, other jobs stay in it, and every index River's
// reindexer looks for still exists under its name.
func TestArgsIndexLeavesOutRiverbusJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewPool(t)

	var def string
	require.NoError(t, db.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE indexname = 'river_job_args_index'`).Scan(&def))
	require.Contains(t, def, "USING gin (args)")
	require.Contains(t, def, "WHERE (NOT (args ? 'global_sequence'::text))")

	for _, name := range river.ReindexerIndexNamesDefault() {
		var exists bool
		require.NoError(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = $1)`, name).Scan(&exists))
		require.True(t, exists, "River's reindexer expects index %s", name)
	}

	// A riverbus job and another job with the same searched-for value.
	_, err := db.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state) VALUES
		('{"global_sequence": 1, "customer": "c-1"}', 'billing', 5, 1, 'billing', 'available'),
		('{"customer": "c-1"}', 'send_email', 5, 1, 'default', 'available')`)
	require.NoError(t, err)
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	const search = `SELECT kind FROM river_job WHERE args @> '{"customer": "c-1"}' AND NOT args ? 'global_sequence'`
	var plan []string
	rows, err := conn.Query(ctx, "EXPLAIN "+search)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, strings.Join(plan, "\n"), "river_job_args_index", "a search that excludes riverbus jobs uses the index")
	var kinds []string
	rows, err = conn.Query(ctx, search)
	require.NoError(t, err)
	for rows.Next() {
		var kind string
		require.NoError(t, rows.Scan(&kind))
		kinds = append(kinds, kind)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"send_email"}, kinds)

	// A plain search still finds both, without the index.
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args @> '{"customer": "c-1"}'`).Scan(&n))
	require.Equal(t, 2, n)
}
