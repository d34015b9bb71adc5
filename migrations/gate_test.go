package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/riverbus/riverbus/migrations"
)

// A gate stops on the schema check's refusal only, wrapped or not, keeps
// the first, and cancels the context it gave.
func TestGateStopsOnlyForANewerSchema(t *testing.T) {
	t.Parallel()
	g := migrations.NewGate(0)
	require.Equal(t, migrations.Newest(), g.Code())
	ctx, cancel := g.Context(context.Background())
	defer cancel()

	require.False(t, g.Stop(nil))
	require.False(t, g.Stop(errors.New("connection refused")))
	require.False(t, g.Stop(&pgconn.PgError{Code: "40P01"}))
	require.NoError(t, g.Err())
	require.NoError(t, ctx.Err())

	refusal := &pgconn.PgError{Code: migrations.SchemaTooNewCode, Message: "riverbus schema version 31 needs code that knows version 30 or newer; this code knows 29",
		Detail: "schema=31 needs=30 code=29"}
	require.True(t, g.Stop(fmt.Errorf("fan out pool %q: lock pool: %w", "orders", refusal)))
	require.True(t, g.Stop(&migrations.SchemaTooNewError{Schema: 40, Needs: 40, Code: 29}))
	require.Equal(t, &migrations.SchemaTooNewError{Schema: 31, Needs: 30, Code: 29}, g.Err())
	<-g.Stopped()
	<-ctx.Done()
}
